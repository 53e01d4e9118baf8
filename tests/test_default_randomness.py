"""A release without a seed is deployment-grade, on every protocol and every public path.

A call that runs on someone's records and asks for no seed draws its private values from
the operating system's CSPRNG through the fixed-work samplers (``DeploymentNoise``), so
two such calls on the same data give different releases, each labelled ``"deployment"``.
A seed asks for a reproducible study: the same seed gives the same release, labelled
``"simulation"``. Checked here for every registered protocol and curve release through
the simulator, the protocol-layer release functions, every one-call function,
``fedustat.estimate``, the command line on a user's file, and a networked run.

"Different" is checked over a few repetitions (two distinct releases within
``MAX_REPEATS`` draws) because a release on a grid (a quantile) can repeat by chance.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import fedustat
from fedustat.cli import main
from fedustat.protocols import registry
from fedustat.protocols.base import Protocol
from fedustat.runtime.network.certs import create_deployment, load_credentials
from fedustat.runtime.network.server import serve
from fedustat.stats import auc_kernel, gini_kernel, kendall_tau_kernel
from network_deployment import run_deployment
from release_cases import (
    ReleaseCase,
    ecdf_protocol_cases,
    flatten,
    function_cases,
    integer_scores,
    labelled,
    pairs_xy,
    protocol_cases,
    unit_values,
)

REPEATS = 3
MAX_REPEATS = 12
EPSILON = 0.5


def grade(release: Any) -> str:
    """The randomness label a release carries: its ``noise`` (an Estimate, a curve
    result), or the labels its parts carry (``noise_kind``, ``diagnostics.noise_source``
    of the protocol-layer releases); "unlabelled" when it carries none, "mixed" when its
    parts disagree."""
    label = getattr(release, "noise", None)
    if isinstance(label, str):
        return label
    names = ("noise", "noise_kind", "noise_source")
    labels = {value for path, value in flatten(release).items()
              if path.rsplit(".", 1)[-1] in names and isinstance(value, str)}
    if not labels:
        return "unlabelled"
    return labels.pop() if len(labels) == 1 else "mixed"


def numbers(release: Any) -> tuple[float, ...]:
    """Every number a release holds, in a fixed order (what two releases are compared by)."""
    out = []
    for _, value in sorted(flatten(release).items()):
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out.extend(np.asarray(value, dtype=float).ravel().tolist())
        elif isinstance(value, int | float | np.number) and not isinstance(value, bool):
            out.append(float(value))
    return tuple(np.round(out, 12))


def assert_deployment_and_fresh(run: Callable[[], Any], describe: Callable[[Any], Any] = numbers,
                                label: Callable[[Any], str] = grade) -> None:
    """Unseeded runs are labelled deployment-grade and do not repeat one release.

    Deployment randomness cannot be seeded, so the test draws until two releases differ,
    at most ``MAX_REPEATS`` times: a release on a grid (a median) repeats a value with
    probability p per draw, and all ``MAX_REPEATS`` coincide with probability about
    sum p^12 (below 1e-9 for the grids here; 6e-5 for six draws of the median of 120
    values on 257 points at epsilon 0.5, measured).
    """
    releases = [run() for _ in range(REPEATS)]
    while len({describe(r) for r in releases}) < 2 and len(releases) < MAX_REPEATS:
        releases.append(run())
    assert [label(r) for r in releases] == ["deployment"] * len(releases)
    assert len({describe(r) for r in releases}) >= 2, "every unseeded release was identical"


# ------------------------------------------------------------------ the simulator


SIMULATED = [c for c in protocol_cases() + ecdf_protocol_cases()
             if c.protocol is None or c.protocol.is_private]


def test_every_registered_protocol_has_a_simulated_case():
    covered = {c.name.split("[")[0] for c in SIMULATED if c.protocol is not None}
    private = {e.name for e in registry.available()} - {"exact"}
    assert private <= covered


@pytest.mark.parametrize("case", SIMULATED, ids=[c.name for c in SIMULATED])
def test_simulate_without_a_seed_is_deployment_grade(case: ReleaseCase):
    assert_deployment_and_fresh(lambda: case.run(case.data, None))
    seeded = [case.run(case.data, 7) for _ in range(2)]
    assert [grade(r) for r in seeded] == ["simulation"] * 2
    assert numbers(seeded[0]) == numbers(seeded[1])


def test_a_protocol_built_with_a_simulation_source_keeps_it():
    from fedustat.privacy.noise import SimulationNoise
    from fedustat.runtime.simulate import simulate

    kernel = auc_kernel()
    data = labelled()[0]
    chosen = registry.make("central-laplace", kernel, epsilon=1.0, noise=SimulationNoise(3))
    assert simulate(chosen, data).noise == "simulation"
    assert simulate(registry.make("exact", kernel, epsilon=math.inf), data).noise == "none"


# ------------------------------------------------------------------ release functions


FUNCTIONS = function_cases()


@pytest.mark.parametrize("case", FUNCTIONS, ids=[c.name for c in FUNCTIONS])
def test_release_functions_without_a_seed_are_deployment_grade(case: ReleaseCase):
    assert_deployment_and_fresh(lambda: case.run(case.data, None))


# ------------------------------------------------------------------ one-call functions


def _one_call_cases() -> dict[str, Callable[[], Any]]:
    (scores_labels, _), (xy, _) = labelled(), pairs_xy()
    score, label = scores_labels[:, 0], scores_labels[:, 1].astype(int)
    x = unit_values()[0][:, 0]
    categories = np.arange(120) % 5
    grid = {"bounds": (0.0, 1.0), "grid_points": 257}
    return {
        "roc_auc_score": lambda: fedustat.roc_auc_score(label, score, epsilon=EPSILON),
        "kendalltau": lambda: fedustat.kendalltau(xy[:, 0], xy[:, 1], epsilon=EPSILON),
        "gini_mean_difference": lambda: fedustat.gini_mean_difference(
            x, bounds=(0.0, 1.0), epsilon=EPSILON),
        "duplicate_pair_ratio": lambda: fedustat.duplicate_pair_ratio(categories,
                                                                      epsilon=EPSILON),
        "rand_score": lambda: fedustat.rand_score(categories, categories % 2,
                                                  epsilon=EPSILON),
        "ecdf": lambda: fedustat.ecdf(x, epsilon=EPSILON, **grid),
        "quantile": lambda: fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=EPSILON, **grid),
        "median": lambda: fedustat.median(x, epsilon=EPSILON, **grid),
        "roc_curve": lambda: fedustat.roc_curve(label, score, epsilon=EPSILON, **grid),
        "hosmer_lemeshow": lambda: fedustat.hosmer_lemeshow(label, score, epsilon=EPSILON,
                                                            n_groups=4),
        "cumsum": lambda: fedustat.cumsum(x, epsilon=EPSILON, bounds=(0.0, 1.0)),
    }


ONE_CALL = _one_call_cases()


def test_every_one_call_function_with_an_rng_is_covered():
    drawing = {name for name in fedustat.__all__
               if callable(getattr(fedustat, name))
               and not inspect.isclass(getattr(fedustat, name))
               and "rng" in inspect.signature(getattr(fedustat, name)).parameters}
    assert drawing - {"estimate"} == set(ONE_CALL)


@pytest.mark.parametrize("name", sorted(ONE_CALL))
def test_one_call_functions_without_a_seed_are_deployment_grade(name: str):
    assert_deployment_and_fresh(ONE_CALL[name])


def test_an_explicit_simulation_without_a_seed_is_labelled_a_study():
    score, label = labelled()[0][:, 0], labelled()[0][:, 1]
    release = fedustat.roc_auc_score(label, score, epsilon=EPSILON, noise="simulation")
    assert release.noise == "simulation"
    assert "a study, not a protection" in str(release)
    with pytest.raises(ValueError, match="deployment noise cannot be seeded"):
        fedustat.roc_auc_score(label, score, epsilon=EPSILON, noise="deployment", rng=1)


# ------------------------------------------------------------------ fedustat.estimate


GINI = gini_kernel((0.0, 1.0))
#: Every registered private protocol: (kernel, data, parameters), as a user would call it.
ESTIMATE_CASES: dict[str, tuple[Any, np.ndarray, dict[str, Any]]] = {
    "central-laplace": (auc_kernel(), labelled()[0], {}),
    "ldp-quantized": (GINI, unit_values()[0], {"k": 8}),
    "ldp-ghazi": (GINI, unit_values()[0], {"k": 8}),
    "ghazi-shuffle": (GINI, unit_values()[0], {"k": 8}),
    "ldp-tree": (auc_kernel(), integer_scores()[0], {"d": 16}),
    "pairs-2pc": (kendall_tau_kernel("a"), pairs_xy(n=40)[0], {"P": 2}),
    "umpc": (GINI, unit_values(n=40)[0], {}),
    "fedauc-rr": (auc_kernel(), labelled()[0], {"n_clients": 12}),
    "fedauc-laplace": (auc_kernel(), labelled()[0], {"n_clients": 12}),
    "fedauc-laplace-local": (auc_kernel(), labelled()[0], {"n_clients": 12}),
    "fedauc-laplace-global": (auc_kernel(), labelled()[0], {"n_clients": 12}),
    "fedauc-gaussian": (auc_kernel(), labelled()[0], {"n_clients": 12, "delta": 1e-5}),
    "fedauc-adaptive": (auc_kernel(), labelled()[0], {"n_clients": 12}),
}


def test_every_registered_protocol_has_an_estimate_case():
    assert {e.name for e in registry.available()} - {"exact"} == set(ESTIMATE_CASES)


@pytest.mark.parametrize("name", sorted(ESTIMATE_CASES))
def test_estimate_without_a_seed_is_deployment_grade(name: str):
    kernel, data, params = ESTIMATE_CASES[name]
    assert_deployment_and_fresh(lambda: fedustat.estimate(kernel, data, protocol=name,
                                                          epsilon=EPSILON, **params))
    seeded = fedustat.estimate(kernel, data, protocol=name, epsilon=EPSILON, rng=3, **params)
    assert seeded.noise == "simulation"
    assert seeded.value == fedustat.estimate(kernel, data, protocol=name, epsilon=EPSILON,
                                             rng=3, **params).value


CURVE_RELEASES = [(name, protocol) for name in ("ecdf", "quantile", "median", "roc", "hl")
                  for protocol in [None] + (["ecdf-secagg", "ecdf-fss"] if name == "ecdf"
                                            else [])]


@pytest.mark.parametrize(("name", "protocol"), CURVE_RELEASES)
def test_estimate_of_a_curve_without_a_seed_is_deployment_grade(name: str, protocol: Any):
    data = labelled()[0] if name in ("roc", "hl") else unit_values()[0][:, 0]
    # Hosmer-Lemeshow's grid is its own (public probabilities in [0, 1]); the others
    # take their grid from public bounds.
    extra = {} if name == "hl" else {"bounds": (0.0, 1.0)}
    if name == "quantile":
        extra["levels"] = [0.5]
    assert_deployment_and_fresh(lambda: fedustat.estimate(
        name, data, epsilon=EPSILON, protocol=protocol, **extra))


# ------------------------------------------------------------------ the command line


@pytest.fixture(scope="module")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(4)
    n = 200
    label = rng.integers(0, 2, n)
    score = np.clip(rng.normal(0.4 + 0.2 * label, 0.15), 0.0, 1.0)
    path = tmp_path_factory.mktemp("cli") / "mine.csv"
    pd.DataFrame({"score": score, "label": label, "integer": np.floor(score * 15.99),
                  "y": np.clip(score + rng.normal(0, 0.1, n), 0.0, 1.0)}).to_csv(path,
                                                                                  index=False)
    return str(path)


#: (statistic, columns, protocol, options): a user's file through ``fedustat estimate``.
CLI_CASES = [
    ("auc", "score,label", "central-laplace", []),
    ("gini", "score", "ldp-quantized", ["--bounds", "0,1", "--param", "k=8"]),
    ("gini", "score", "ldp-ghazi", ["--bounds", "0,1", "--param", "k=8"]),
    ("gini", "score", "ghazi-shuffle", ["--bounds", "0,1", "--param", "k=8"]),
    ("auc", "integer,label", "ldp-tree", ["--param", "d=16"]),
    ("kendall", "score,y", "pairs-2pc", ["--param", "P=2"]),
    ("gini", "score", "umpc", ["--bounds", "0,1"]),
    *[("auc", "score,label", name, ["--param", "n_clients=12"])
      for name in ("fedauc-rr", "fedauc-laplace", "fedauc-laplace-local",
                   "fedauc-laplace-global", "fedauc-adaptive")],
    ("auc", "score,label", "fedauc-gaussian", ["--param", "n_clients=12", "--delta", "1e-5"]),
    ("ecdf", "score", "dp-ecdf", ["--bounds", "0,1"]),
    ("ecdf", "score", "ecdf-secagg", ["--bounds", "0,1"]),
    ("ecdf", "score", "ecdf-fss", ["--bounds", "0,1"]),
    ("median", "score", None, ["--bounds", "0,1"]),
    ("roc", "score,label", None, ["--bounds", "0,1"]),
    ("hl", "score,label", None, []),
]


def test_every_registered_protocol_has_a_cli_case():
    named = {protocol for _, _, protocol, _ in CLI_CASES}
    assert {e.name for e in registry.available()} - {"exact"} <= named
    assert {e.name for e in registry.available_curves()} <= named


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(argv) in (0, None)
    return json.loads(capsys.readouterr().out)[0]


@pytest.mark.parametrize(("statistic", "columns", "protocol", "options"), CLI_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CLI_CASES])
def test_cli_on_a_users_file_is_deployment_grade(capsys, users_file, statistic, columns,
                                                 protocol, options):
    argv = ["estimate", "--statistic", statistic, "--file", users_file, "--columns", columns,
            "--epsilon", str(EPSILON), "--format", "json", *options]
    if protocol is not None:
        argv += ["--protocol", protocol]
    assert_deployment_and_fresh(lambda: _cli(capsys, argv),
                                describe=lambda r: json.dumps(r, sort_keys=True),
                                label=lambda r: r["noise"])
    # A seed asks for a study: reproducible and labelled as one.
    seeded = [_cli(capsys, [*argv, "--seed", "5"]) for _ in range(2)]
    assert [r["noise"] for r in seeded] == ["simulation"] * 2
    assert seeded[0] == seeded[1]


def test_cli_says_a_seeded_release_is_a_study(capsys, users_file):
    assert main(["estimate", "--statistic", "auc", "--file", users_file, "--columns",
                 "score,label", "--seed", "1"]) in (0, None)
    out = capsys.readouterr().out
    assert "seed=1: a simulation study, not a protection" in out
    assert "NOT a protection" in out


# ------------------------------------------------------------------ networked runs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return create_deployment(tmp_path_factory.mktemp("certs"), 3)


NETWORK_CASES = sorted(ESTIMATE_CASES)


@pytest.mark.parametrize("name", NETWORK_CASES)
def test_networked_run_without_a_seed_is_deployment_grade(certs, name: str):
    kernel, data, params = ESTIMATE_CASES[name]
    if "n_clients" in params:  # each silo is one FedAUC client
        params = {**params, "n_clients": 3}

    def make() -> Protocol:
        return registry.make(name, kernel, epsilon=EPSILON, **params)

    def run() -> tuple[Any, list[Any]]:
        server, parties = run_deployment(certs, make, np.array_split(data, 3), rng=None,
                                         timeout=60.0)
        assert not isinstance(server, Exception), server
        assert not any(isinstance(p, Exception) for p in parties), parties
        return server, parties

    runs = [run() for _ in range(2)]
    for server, parties in runs:
        assert server.estimate.noise == "deployment"
        assert [p.release["noise"] for p in parties] == ["deployment"] * 3
    assert runs[0][0].estimate.raw_value != runs[1][0].estimate.raw_value


def test_a_networked_protocol_built_with_a_simulation_source_is_refused(certs):
    from fedustat.privacy.noise import SimulationNoise

    chosen = registry.make("central-laplace", auc_kernel(), epsilon=1.0,
                           noise=SimulationNoise(1))
    with pytest.raises(ValueError, match="pass a seed to ask for simulation randomness"):
        serve(chosen, 2, load_credentials(certs, "server"))


# ------------------------------------------------------------------ the distributed engine


#: Protocols the engine runs: LDP reports reduced on the workers, label-DP clients (one
#: sample each there) ranked by a distributed sort, U-MPC's relay rounds between workers.
ENGINE_CASES = {"ldp-quantized": {}, "ldp-tree": {}, "fedauc-rr": {"n_clients": None},
                "umpc": {}}


@pytest.fixture(scope="module")
def cluster() -> Any:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as lc, \
            distributed.Client(lc) as client:
        yield client


@pytest.mark.parametrize("name", sorted(ENGINE_CASES))
def test_engine_without_a_seed_is_deployment_grade(cluster, name: str):
    kernel, data, params = ESTIMATE_CASES[name]
    params = {key: value for key, value in {**params, **ENGINE_CASES[name]}.items()
              if value is not None}
    assert_deployment_and_fresh(lambda: fedustat.estimate(
        kernel, data, protocol=name, epsilon=EPSILON, engine=cluster, batch_size=[20, 20]
        if len(data) == 40 else None, **params))


# ------------------------------------------------------------------ inside Flower


FLOWER_CASES = {
    "central-laplace": {},
    "ldp-quantized": {"k": 8, "bounds": [0, 1]},
    "ldp-tree": {"d": 16},
    "fedauc-rr": {"n_clients": 3},
    "fedauc-laplace-local": {"n_clients": 3},
    "pairs-2pc": {"P": 2},
    "umpc": {"bounds": {"score": [0, 1]}},
}


@pytest.mark.parametrize("name", sorted(FLOWER_CASES))
def test_flower_run_without_a_seed_is_deployment_grade(tmp_path, certs, name: str):
    # The Flower ServerApp's rounds driven in process (tests/test_flower.py's harness):
    # the run config's noise "auto" with no seed gives every role deployment randomness.
    pytest.importorskip("flwr")
    from test_flower import in_process
    from test_flower import labelled as flower_data

    data = flower_data(60, integer=name == "ldp-tree")
    run = {"protocol": name, "params": json.dumps(FLOWER_CASES[name])}
    extra = {"certs": str(certs)} if name in ("pairs-2pc", "umpc") else {}
    releases = []
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        releases.append(in_process(tmp_path / str(i), run, data, **extra).drive().estimate)
    assert [r.noise for r in releases] == ["deployment"] * 2
    assert releases[0].raw_value != releases[1].raw_value
