"""What server and parties of a networked run agree on: the public configuration.

Every registered protocol and curve release describes its configuration as plain data
(what it was built with, and every public setting derived from it, nested objects
describing themselves); anything that cannot be described is an error here, not a
setting silently left out. For every protocol, changing any constructor parameter that
changes the release changes the configuration, and the difference is named in words.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from fedustat.privacy.noise import DeploymentNoise
from fedustat.protocols import registry
from fedustat.protocols.base import Protocol
from fedustat.runtime.network.service import (
    SOURCE_ARGUMENTS,
    UndescribedError,
    configuration_differences,
    describe,
    fingerprint,
    public_configuration,
)
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
    variance_kernel,
)
from fedustat.stats.designs import uniform_sample

GINI = gini_kernel((0.0, 1.0))
AUC = auc_kernel()
KENDALL = kendall_tau_kernel("a")
_KENDALL_COLUMNS = {"bounds": {"x": (0.0, 1.0)}, "domain": {"y": [0.0, 1.0]}}


class OtherKernel:
    """A variant that needs another kernel than the baseline's: compared with the
    baseline parameters on that kernel (``params`` without the varied one)."""

    def __init__(self, kernel: Any, params: dict[str, Any]) -> None:
        self.kernel, self.params = kernel, params

#: Per protocol: the kernel and the parameters of a baseline build.
BASE: dict[str, tuple[Any, dict[str, Any]]] = {
    "central-laplace": (AUC, {}),
    "exact": (AUC, {}),
    "fedauc-adaptive": (AUC, {}),
    "fedauc-gaussian": (AUC, {"delta": 1e-5}),
    "fedauc-laplace": (AUC, {}),
    "fedauc-laplace-global": (AUC, {}),
    "fedauc-laplace-local": (AUC, {}),
    "fedauc-rr": (AUC, {}),
    "ghazi-shuffle": (GINI, {}),
    "ldp-ghazi": (GINI, {}),
    "ldp-quantized": (AUC, {"bounds": {"score": (0.0, 1.0)}}),
    "ldp-tree": (AUC, {"d": 16}),
    "pairs-2pc": (GINI, {}),
    "umpc": (GINI, {}),
}
_FEDAUC_LAPLACE = {"alpha": 0.25, "mechanism": "gaussian", "n_samples": 8, "n_clients": 3,
                   "partition": "by-score", "client_of_sample": np.arange(30) % 3,
                   "noise": DeploymentNoise()}
_QUANTIZED = {"k": 4, "bounds": (0.0, 2.0), "domain": [0.0, 0.5, 1.0],
              "quantizer": "randomized", "quantized_kernel": "avg", "n_parties": 16,
              "lipschitz": 2.0, "noise": DeploymentNoise(), "max_evaluations": 1000,
              "avg_tol": 0.01}
#: Per protocol: each parameter with another value that changes the release.
VARIANTS: dict[str, dict[str, Any]] = {
    "central-laplace": {"design": uniform_sample(30, 2, 40, rng=0),
                        "noise": DeploymentNoise()},
    "exact": {"design": uniform_sample(30, 2, 40, rng=0)},
    "fedauc-adaptive": _FEDAUC_LAPLACE,
    "fedauc-gaussian": {**{k: v for k, v in _FEDAUC_LAPLACE.items() if k != "mechanism"},
                        "sensitivity": "global"},
    "fedauc-laplace": _FEDAUC_LAPLACE,
    "fedauc-laplace-global": _FEDAUC_LAPLACE,
    "fedauc-laplace-local": _FEDAUC_LAPLACE,
    "fedauc-rr": {"n_clients": 3, "partition": "by-score",
                  "client_of_sample": np.arange(30) % 3, "noise": DeploymentNoise()},
    "ghazi-shuffle": {**_QUANTIZED, "n_messages": 3, "min_honest": 3, "security_bits": 8,
                      "frac_bits": 16, "ring_bits": 40, "diagonal_share": 0.25, "rank": 2,
                      "dim": 4, "projection_seed": 2, "shuffler": "service"},
    "ldp-ghazi": {**_QUANTIZED, "rank": 2, "dim": 4, "projection_seed": 2,
                  "mechanism": "laplace"},
    "ldp-quantized": {**_QUANTIZED, "bounds": {"score": (0.0, 2.0)},
                      "domain": {"score": [0.0, 0.5, 1.0]},
                      # Kendall's y made public (the baseline keeps both columns private).
                      "public_columns": OtherKernel(KENDALL, {**_KENDALL_COLUMNS,
                                                             "public_columns": ("y",)})},
    "ldp-tree": {"d": 8, "split": "budget-basic", "a": 2.0, "noise": DeploymentNoise(),
                 "bounds": (0.0, 1.0), "oracle": "hadamard", "max_report_bits": 8,
                 "recursion": "pruned"},
    "pairs-2pc": {"P": 2, "noise_split": "split", "comparison": "circuit", "all_pairs": True,
                  "fixed_point": FixedPoint(40, 16), "noise": DeploymentNoise(),
                  "max_pairs": 1000, "bounds": (0.0, 2.0), "precision": 0.5,
                  "dealer": "service"},
    "umpc": {"design": "bernoulli", "edges": 40, "threat_model": "dis", "f_honest": 0.25,
             "fail_prob": 1e-6, "min_honest": 2, "comparison": "circuit",
             "fixed_point": FixedPoint(40, 16), "noise": DeploymentNoise(),
             "bounds": (0.0, 2.0), "precision": 0.5, "dealer": "service"},
}
#: Parameters that do not change the release, and why.
UNUSED: dict[str, dict[str, str]] = {
    "exact": {"noise": "the exact value draws no noise (the factory drops it)"},
}
#: Where the class names a factory parameter otherwise.
NAMED_AS = {("ldp-tree", "bounds"): "score_bounds"}
#: Another statistic than the baseline's, where the protocol serves a kernel of bounds.
OTHER_STATISTIC = {"pairs-2pc": duplicate_pair_kernel()}
#: The budget's delta, where a protocol is pure epsilon-DP and does not use it.
PURE_EPSILON = {"central-laplace", "exact", "fedauc-adaptive", "fedauc-laplace",
                "fedauc-laplace-global", "fedauc-laplace-local", "fedauc-rr", "ghazi-shuffle",
                "ldp-ghazi", "ldp-quantized", "ldp-tree", "pairs-2pc", "umpc"}

CURVE_BASE = {"bounds": (0.0, 1.0), "precision": 0.125}
CURVE_VARIANTS: dict[str, Any] = {
    "thresholds": {"thresholds": [0.1, 0.2, 0.9]},  # replaces bounds and precision
    "query": {"query": [0, 2]}, "n_servers": {"n_servers": 3},
    "contributors": {"contributors": 3}, "min_honest": {"min_honest": 2},
    "frac_bits": {"frac_bits": 16}, "ring_bits": {"ring_bits": 48},
    "randomness": {"randomness": "os"}, "bounds": {"bounds": (0.0, 2.0)},
    "precision": {"precision": 0.25}, "method": {"method": "003-tree"},
}
CURVE_UNUSED = {"ecdf-fss": {"n_servers": "FSS has exactly two computing parties"},
                # SecAgg+'s options build another class: tests/test_secagg_plus.py varies them.
                "ecdf-secagg": {"aggregation": "", "degree": "", "threshold": "",
                                "max_dropout": ""}}


def build(name: str, kernel: Any = None, **changes: Any) -> Protocol:
    base_kernel, params = BASE[name]
    varied = next((v for v in changes.values() if isinstance(v, OtherKernel)), None)
    if varied is not None:
        return registry.make(name, varied.kernel, epsilon=1.0, **varied.params)
    if "domain" in changes:  # a discrete domain replaces the declared bounds
        params = {k: v for k, v in params.items() if k != "bounds"}
    params = {**params, **changes}
    # FedAUC's Gaussian mechanism is (epsilon, delta)-DP: it needs the delta a pure
    # mechanism refuses.
    delta = params.pop("delta", 1e-5 if params.get("mechanism") == "gaussian" else 0.0)
    return registry.make(name, base_kernel if kernel is None else kernel,
                         epsilon=params.pop("epsilon", 1.0), delta=delta, **params)


def build_curve(name: str, changes: dict[str, Any]) -> Protocol:
    params = dict(CURVE_BASE) if "thresholds" not in changes else {}
    return registry.make_curve(name, epsilon=changes.pop("epsilon", 1.0),
                               **{**params, **changes})


def test_the_tables_cover_every_registered_protocol():
    # A protocol registered later must be added here, with its parameters' variants.
    assert set(BASE) == {entry.name for entry in registry.available()}
    for name in BASE:
        covered = set(VARIANTS[name]) | set(UNUSED.get(name, {}))
        assert covered == set(registry.parameters(name)), name
    for entry in registry.available_curves():
        covered = set(CURVE_VARIANTS) | set(CURVE_UNUSED.get(entry.name, {}))
        assert covered == set(registry.curve_parameters(entry.name)), entry.name


@pytest.mark.parametrize("name", sorted(BASE))
def test_every_protocol_describes_its_configuration(name):
    # Plain data (JSON), the same for two builds with the same options.
    configuration = public_configuration(build(name))
    assert json.loads(json.dumps(configuration)) == configuration
    assert fingerprint(build(name)) == fingerprint(build(name))
    for parameter, value in VARIANTS[name].items():
        json.dumps(public_configuration(build(name, **{parameter: value})))


@pytest.mark.parametrize(("name", "parameter"),
                         [(n, p) for n in sorted(BASE) for p in VARIANTS[n]])
def test_each_parameter_that_changes_the_release_changes_the_configuration(name, parameter):
    value = VARIANTS[name][parameter]
    if isinstance(value, OtherKernel):
        base = registry.make(name, value.kernel, epsilon=1.0,
                             **{k: v for k, v in value.params.items() if k != parameter})
    else:
        base = build(name)
    changed = build(name, **{parameter: value})
    assert fingerprint(changed) != fingerprint(base)
    named = configuration_differences(public_configuration(changed),
                                      public_configuration(base))
    # The difference names the option, as the protocol calls it.
    option = NAMED_AS.get((name, parameter), parameter)
    if parameter in SOURCE_ARGUMENTS:  # compared as the run resolved it
        option = f"settings.{parameter}"
    assert any(d.split(" = ")[0] == option or d.split(" = ")[0].split(".")[0] == option
               for d in named), named


@pytest.mark.parametrize("name", sorted(BASE))
def test_the_budget_and_the_statistic_change_the_configuration(name):
    base = public_configuration(build(name))
    if name != "exact":  # always epsilon = inf
        assert configuration_differences(public_configuration(build(name, epsilon=2.0)),
                                         base)[0].startswith("epsilon = 2.0 (party) vs 1.0")
    if name not in PURE_EPSILON:
        assert public_configuration(build(name, delta=1e-3)) != base
    kernel = BASE[name][0]
    if kernel is GINI:
        # The kernel's declared bounds (and so its sensitivity), and another statistic.
        wider = configuration_differences(
            public_configuration(build(name, kernel=gini_kernel((0.0, 2.0)))), base)
        assert "kernel.bounds = [0.0, 2.0] (party) vs [0.0, 1.0] (server)" in wider
        other = configuration_differences(public_configuration(build(
            name, kernel=OTHER_STATISTIC.get(name, variance_kernel((0.0, 1.0))))), base)
        assert any(d.startswith("kernel.name = ") for d in other), other


@pytest.mark.parametrize(("name", "parameter"),
                         [(e.name, p) for e in registry.available_curves()
                          for p in CURVE_VARIANTS if p not in CURVE_UNUSED.get(e.name, {})])
def test_each_curve_parameter_changes_the_configuration(name, parameter):
    base = build_curve(name, {})
    changed = build_curve(name, dict(CURVE_VARIANTS[parameter]))
    assert fingerprint(changed) != fingerprint(base)
    named = configuration_differences(public_configuration(changed),
                                      public_configuration(base))
    shown = f"settings.{parameter}" if parameter in SOURCE_ARGUMENTS else parameter
    assert any(d.startswith(f"{shown} = ") for d in named), named
    assert public_configuration(build_curve(name, {"epsilon": 2.0})) != \
        public_configuration(base)


def test_a_difference_is_named_in_words():
    server = registry.make("ldp-quantized", gini_kernel((0.0, 100.0)), epsilon=1.0, k=8)
    party = registry.make("ldp-quantized", gini_kernel((0.0, 50.0)), epsilon=1.0, k=4)
    assert configuration_differences(public_configuration(party),
                                     public_configuration(server), me="party-1") == [
        "k = 4 (party-1) vs 8 (server)",
        "kernel.bounds = [0.0, 50.0] (party-1) vs [0.0, 100.0] (server)",
        "kernel.output_range = [0.0, 50.0] (party-1) vs [0.0, 100.0] (server)"]
    # A long grid is compared by digest, not listed.
    long = registry.make_curve("ecdf-secagg", epsilon=1.0,
                               thresholds=np.linspace(0.0, 1.0, 1000))
    short = registry.make_curve("ecdf-secagg", epsilon=1.0,
                                thresholds=np.linspace(0.0, 1.0, 999))
    named = configuration_differences(public_configuration(long), public_configuration(short))
    assert named[0].startswith("thresholds = 1000 values (sha256 ")
    assert len(json.dumps(public_configuration(long))) < 10_000


class _Opaque:
    """A setting that says nothing about itself."""


class _HoldsOpaque(Protocol):
    name = "holds-opaque"

    def __init__(self) -> None:
        self.setting = _Opaque()

    def encode_parties(self, records, parties):
        return records

    def init_server(self, n_parties):
        return None

    def party_step(self, state, inbox, rng):
        raise NotImplementedError

    def server_step(self, state, inbox, rng):
        raise NotImplementedError


def test_a_setting_that_cannot_be_described_is_an_error():
    with pytest.raises(UndescribedError, match=r"setting is a _Opaque, which does not "
                                               r"describe itself; give its class a "
                                               r"public_description\(\) method"):
        public_configuration(_HoldsOpaque())


def test_functions_are_described_with_what_they_close_over():
    def scaled(factor: float) -> Any:
        return lambda x: factor * x

    assert describe(scaled(2.0)) != describe(scaled(3.0))
    assert describe(math.sqrt) == "math.sqrt"


@pytest.mark.parametrize("name", ["ldp-quantized", "umpc", "fedauc-rr"])
def test_a_source_left_unset_and_one_given_as_deployment_agree(name):
    # A device built in Python (noise unset, resolved to the OS CSPRNG for the run) and a
    # server built by the command line (noise=DeploymentNoise()) run one configuration.
    from fedustat.runtime.network.service import resolve_randomness

    unset, _ = resolve_randomness(build(name), None)
    given, _ = resolve_randomness(build(name, noise=DeploymentNoise()), None)
    assert public_configuration(unset) == public_configuration(given)
