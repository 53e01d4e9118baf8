"""Every bad input gets a clear error, for every registered protocol and on the command line;
and deployment noise runs end to end for every registered protocol.

A case per protocol gives a kernel it computes, a small data set (n = 40 to 80: the
deployment samplers cost a Python/Rust call per draw) and the parameters it needs. The
API tests call ``fedustat.estimate``; the CLI tests run ``main(argv)`` in-process and check
the exit status, the one-line ``error: ...`` message and that no traceback is printed,
and two cases run the real console entry point in a subprocess.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import traceback
import tracemalloc
import typing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedustat
from fedustat._validation import (
    LARGEST_EPSILON,
    SMALLEST_EPSILON,
    InputRangeError,
    as_float_array,
)
from fedustat.cli import main
from fedustat.curve_dispatch import release_curve
from fedustat.privacy.accounting import advanced_composition, per_step_budget_advanced
from fedustat.privacy.errors import BoundedBias
from fedustat.protocols import registry
from fedustat.protocols.ecdf import dp_ecdf
from fedustat.protocols.ecdf.hosmer_lemeshow import dp_hosmer_lemeshow
from fedustat.protocols.ecdf.private_quantiles import check_quantile_size
from fedustat.protocols.ecdf.quantiles import quantile_interval
from fedustat.protocols.ecdf.release import ECDF_GRID_LIMIT
from fedustat.protocols.mpc.encoding import ColumnEncoding
from fedustat.stats import auc_kernel, gini_kernel, kernels
from fedustat.stats.kernels import Kernel, user_kernel

GINI = gini_kernel((0.0, 1.0))


def labelled(n: int = 60, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    scores = np.clip(rng.normal(0.5, 0.15, n) + 0.1 * labels, 0.0, 1.0)
    return auc_kernel().pack(scores, labels)


def integer_scores(n: int = 60, d: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    scores = np.clip(rng.integers(0, d - 4, n) + 3 * labels, 0, d - 1).astype(float)
    return auc_kernel().pack(scores, labels)


def unit_values(n: int = 60, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).beta(2.0, 5.0, n)[:, None]


@dataclass(frozen=True)
class Case:
    """A protocol, a kernel it computes, small data and the parameters it needs."""

    kernel: Kernel
    data: np.ndarray
    params: dict[str, Any] = field(default_factory=dict)
    delta: float = 0.0


FEDAUC = {"n_clients": 6}
CASES: dict[str, Case] = {
    "central-laplace": Case(auc_kernel(), labelled()),
    "exact": Case(auc_kernel(), labelled()),
    "ldp-quantized": Case(auc_kernel(), labelled(), {"k": 8, "bounds": (0.0, 1.0)}),
    "ldp-ghazi": Case(GINI, unit_values(), {"k": 8}),
    # frac_bits=8: at the default 24 fractional bits the Pólya noise is ~10^5-10^6 ring
    # units per coordinate, and DeploymentNoise.polya draws it in time linear in its mean.
    "ghazi-shuffle": Case(GINI, unit_values(), {"k": 8, "frac_bits": 8}),
    "ldp-tree": Case(auc_kernel(), integer_scores(), {"d": 16}),
    "pairs-2pc": Case(auc_kernel(), labelled(n=40), {"P": 2}),
    "umpc": Case(auc_kernel(), labelled(n=40)),
    "fedauc-rr": Case(auc_kernel(), labelled(), FEDAUC),
    "fedauc-laplace": Case(auc_kernel(), labelled(), FEDAUC),
    "fedauc-laplace-local": Case(auc_kernel(), labelled(), FEDAUC),
    "fedauc-laplace-global": Case(auc_kernel(), labelled(), FEDAUC),
    "fedauc-gaussian": Case(auc_kernel(), labelled(), FEDAUC, delta=1e-5),
    "fedauc-adaptive": Case(auc_kernel(), labelled(), FEDAUC),
}
NAMES = [entry.name for entry in registry.available()]


def run(name: str, data: Any = None, **overrides: Any) -> fedustat.Estimate:
    case = CASES[name]
    kwargs: dict[str, Any] = {"epsilon": 1.0, "delta": case.delta, "rng": 0, **case.params}
    if name == "exact":
        kwargs["epsilon"] = math.inf
    kwargs.update(overrides)
    return fedustat.estimate(case.kernel, case.data if data is None else data,
                             protocol=name, **kwargs)


def test_every_registered_protocol_has_a_case() -> None:
    assert set(CASES) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_case_runs(name: str) -> None:
    release = run(name)
    assert math.isfinite(release.value)
    assert release.noise == ("none" if name == "exact" else "simulation")


# ------------------------------------------------------------------ data


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_data(name: str, bad: float) -> None:
    data = CASES[name].data.copy()
    data[3, 0] = bad
    with pytest.raises(ValueError, match=r"contains 1 NaN or infinite value\(s\)"):
        run(name, data)


@pytest.mark.parametrize("name", [n for n in NAMES if CASES[n].kernel.name == "auc"])
def test_labels_not_in_zero_one(name: str) -> None:
    data = CASES[name].data.copy()
    data[0, 1] = 2.0
    with pytest.raises(ValueError, match=r"label must be binary .*found values \[0.0, 1.0, 2.0\]"):
        run(name, data)


@pytest.mark.parametrize("name", NAMES)
def test_empty_data(name: str) -> None:
    empty = np.empty((0, CASES[name].kernel.n_columns))
    with pytest.raises(ValueError, match=r"data is empty"):
        run(name, empty)


@pytest.mark.parametrize("name", NAMES)
def test_data_that_is_not_numeric(name: str) -> None:
    with pytest.raises(TypeError, match=r"data must be numeric"):
        run(name, [["a", "b"]] * 10)


@pytest.mark.parametrize("name", NAMES)
def test_kernel_and_protocol_of_the_wrong_type(name: str) -> None:
    with pytest.raises(TypeError, match=r"kernel must be a fedustat Kernel, got bytes"):
        fedustat.estimate(b"auc", CASES[name].data, epsilon=1.0, protocol=name)
    with pytest.raises(TypeError, match=r"protocol must be a protocol name \(a string\), got 3"):
        fedustat.estimate(CASES[name].kernel, CASES[name].data, epsilon=1.0,
                          protocol=3)  # type: ignore[arg-type]


# ------------------------------------------------------------------ budget


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.nan])
def test_epsilon_not_positive(name: str, epsilon: float) -> None:
    with pytest.raises(ValueError, match=r"epsilon must be > 0, got"):
        run(name, epsilon=epsilon)


@pytest.mark.parametrize("name", NAMES)
def test_boolean_epsilon_and_delta_are_refused(name: str) -> None:
    # float(True) == 1: taken silently before, a budget of 1 nobody asked for.
    with pytest.raises(TypeError, match=r"epsilon must be a positive number, got the boolean"):
        run(name, epsilon=True)
    with pytest.raises(TypeError, match=r"delta must be a number in \[0, 1\), got the boolean"):
        run(name, delta=False)


# ------------------------------------------------------------------ protocol parameters


@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter_names_the_function_and_lists_the_valid_ones(name: str) -> None:
    valid = ", ".join(registry.parameters(name))
    with pytest.raises(TypeError) as info:
        run(name, bogus=1)
    message = str(info.value)
    assert message.startswith("fedustat.estimate() got an unexpected keyword argument "
                              f"'bogus': it is not an argument of fedustat.estimate nor a "
                              f"parameter of protocol '{name}' (its parameters: {valid})")
    assert "noise" in valid


def test_unknown_parameter_of_a_wrapper_names_the_wrapper() -> None:
    data = labelled()
    with pytest.raises(TypeError, match=r"^fedustat\.roc_auc_score\(\) got an unexpected "
                                        r"keyword argument 'k'.*'central-laplace'"):
        fedustat.roc_auc_score(data[:, 1], data[:, 0], epsilon=1.0, k=8)


def numeric_parameter(name: str) -> str | None:
    """A parameter of the factory annotated as a number (int/float, maybe None)."""
    hints = typing.get_type_hints(registry.factory(name))
    for key in registry.parameters(name):
        args = set(typing.get_args(hints.get(key))) or {hints.get(key)}
        if args - {type(None)} and args - {type(None)} <= {int, float}:
            return key
    return None


WITH_NUMBERS = [n for n in NAMES if numeric_parameter(n) is not None]


def test_every_protocol_but_the_curator_has_a_numeric_parameter() -> None:
    assert set(NAMES) - set(WITH_NUMBERS) == {"central-laplace", "exact"}


@pytest.mark.parametrize("name", WITH_NUMBERS)
def test_non_numeric_parameter_value_names_the_parameter(name: str) -> None:
    key = numeric_parameter(name)
    with pytest.raises(TypeError, match=rf"^parameter '{key}' of protocol '{name}' must be "
                                        r"(an integer|a number).*got 'abc'"):
        run(name, **{key: "abc"})


SIZED = [(n, p) for n in NAMES for p in registry.parameters(n) if p in registry.SIZE_LIMITS]


def test_size_limits_cover_the_protocols_with_sizes() -> None:
    assert {n for n, _ in SIZED} == set(NAMES) - {"central-laplace", "exact"}


@pytest.mark.parametrize(("name", "key"), SIZED)
def test_absurd_size_is_refused_before_allocating(name: str, key: str) -> None:
    limit = registry.SIZE_LIMITS[key]
    with pytest.raises(ValueError, match=rf"parameter '{key}' of protocol '{name}' is "
                                         rf"{limit + 1}, above the limit {limit}"):
        run(name, **{key: limit + 1})


def test_a_size_at_the_limit_passes_the_generic_check() -> None:
    registry.check_parameters("ldp-quantized", {"k": registry.SIZE_LIMITS["k"]})
    with pytest.raises(ValueError, match=r"parameter 'k' of protocol 'ldp-quantized' is "
                                         r"1000000000, above the limit"):
        registry.check_parameters("ldp-quantized", {"k": [8, 10**9]})
    with pytest.raises(ValueError, match=r"'k' of protocol 'ldp-quantized' must be a whole"):
        registry.check_parameters("ldp-quantized", {"k": 2.5})


def test_literal_parameter_lists_its_choices() -> None:
    with pytest.raises(TypeError, match=r"parameter 'noise_split' of protocol 'pairs-2pc' "
                                        r"must be one of 'independent', 'split', got 'x'"):
        run("pairs-2pc", noise_split="x")


def test_a_budget_argument_is_not_a_protocol_parameter() -> None:
    with pytest.raises(TypeError, match=r"epsilon is an argument of its own, not a parameter "
                                        r"of protocol 'umpc'"):
        registry.check_parameters("umpc", {"epsilon": 1.0})


# ------------------------------------------------------------------ noise argument


def test_deployment_noise_refuses_a_seed() -> None:
    with pytest.raises(ValueError, match=r"deployment noise cannot be seeded: pass rng=None"):
        run("central-laplace", noise="deployment", rng=3)


def test_unknown_noise_kind() -> None:
    with pytest.raises(ValueError, match=r"noise must be 'simulation' or 'deployment'"):
        run("central-laplace", noise="secure")


# ------------------------------------------------------------------ deployment end to end


class _Recorder(np.random.Generator):
    """A NumPy generator that records who draws from it (function and file)."""

    calls: typing.ClassVar[Counter[str]] = Counter()


_DRAWS = ["random", "integers", "laplace", "normal", "standard_normal", "geometric", "gamma",
          "poisson", "binomial", "choice", "permutation", "permuted", "shuffle", "uniform",
          "exponential", "bytes", "spawn", "beta", "multinomial"]


def _recording(method: str) -> Any:
    base = getattr(np.random.Generator, method)

    def draw(self: np.random.Generator, *args: Any, **kwargs: Any) -> Any:
        caller = traceback.extract_stack(limit=2)[0]
        if not caller.filename.endswith("test_bad_inputs.py"):  # a draw calling another
            _Recorder.calls[f"{Path(caller.filename).name}:{caller.name}"] += 1
        return base(self, *args, **kwargs)
    return draw


for _method in _DRAWS:
    setattr(_Recorder, _method, _recording(_method))

#: NumPy draws a deployment run may make: public coins only (designs: the pairing
#: permutations and the U-MPC design; the U-MPC design coin, and the dealers and Z each
#: party derives from it; the simulated split of samples into clients; pairs-2pc's public
#: choice of a dealing party for each pair).
PUBLIC_COINS = ("designs.py:", "umpc.py:server_step", "umpc.py:_coin_facts",
                "partitions.py:iid_partition", "pairs_2pc.py:_third_party")
#: Known exception: ghazi-shuffle's simulated shuffler (a trusted party of the shuffle
#: model, run inside the aggregator's step) permutes the messages with the simulator's
#: NumPy stream (seeded from OS entropy in a deployment run), not with the OS CSPRNG.
SHUFFLER = "ghazi_shuffle.py:shuffle_messages"


@pytest.mark.parametrize("name", NAMES)
def test_deployment_noise_end_to_end(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opendp")
    default_rng = np.random.default_rng

    def recorded(seed: Any = None) -> np.random.Generator:
        if isinstance(seed, np.random.Generator):
            return seed
        return _Recorder(default_rng(seed).bit_generator)

    monkeypatch.setattr(np.random, "default_rng", recorded)
    _Recorder.calls.clear()
    release = run(name, noise="deployment", rng=None)
    drawn = set(_Recorder.calls)
    monkeypatch.undo()
    assert math.isfinite(release.value)
    # Every private draw (noise, shares, masks, keys) came from the deployment source.
    private = {d for d in drawn if not d.startswith(PUBLIC_COINS)}
    assert private == ({SHUFFLER} if name == "ghazi-shuffle" else set()), drawn
    if name == "exact":
        assert release.noise == "none" and "no noise" in str(release)
        return
    assert release.noise == "deployment"
    assert "deployment noise" in str(release) and "simulation" not in str(release)
    assert "noise='deployment'" in repr(release)


def test_deployment_noise_source_object_is_used_as_given() -> None:
    noise_mod = pytest.importorskip("fedustat.privacy.noise")
    pytest.importorskip("opendp")
    release = run("central-laplace", noise=noise_mod.DeploymentNoise(), rng=None)
    assert release.noise == "deployment"
    assert release.diagnostics["noise_source"] == "deployment"


def test_simulation_noise_is_reproducible_and_says_so() -> None:
    first, again = run("central-laplace"), run("central-laplace", noise="simulation")
    assert first.value == again.value
    assert "simulation noise: a study, not a protection" in str(first)


# ------------------------------------------------------------------ command line


def cli_error(capsys: pytest.CaptureFixture[str], *argv: str, match: str) -> str:
    """``main(argv)`` exits with status 1 and one ``error: ...`` line; no traceback."""
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    code = info.value.code
    assert isinstance(code, str), code  # a message: Python prints it and exits with 1
    assert code.startswith("error: ") and "\n" not in code, code
    assert "Traceback" not in capsys.readouterr().err
    assert re.search(match, code), code
    return code


@pytest.fixture
def scores_csv(tmp_path: Path) -> Path:
    path = tmp_path / "scores.csv"
    path.write_text("score,label,word\n0.1,0,a\n0.8,1,b\n0.4,0,c\n0.7,1,d\n0.3,1,e\n")
    return path


@pytest.mark.parametrize(("bounds", "match"), [
    ("10,0", r"--bounds must satisfy LO < HI, got '10,0'"),
    ("0,nan", r"--bounds must be finite numbers, got '0,nan'"),
    ("-inf,1", r"--bounds must be finite numbers, got '-inf,1'"),
    ("0,a", r"--bounds must be two numbers separated by a comma"),
])
def test_cli_bad_bounds(capsys: pytest.CaptureFixture[str], bounds: str, match: str) -> None:
    cli_error(capsys, "estimate", "--statistic", "gini", f"--bounds={bounds}", match=match)


def test_cli_absurd_size(capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "gini", "--protocol", "ldp-quantized",
              "--param", "k=1000000000",
              match=r"parameter 'k' of protocol 'ldp-quantized' is 1000000000, above the "
                    r"limit 1048576")


def test_cli_non_numeric_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "gini", "--protocol", "ldp-quantized",
              "--param", "k=abc",
              match=r"parameter 'k' of protocol 'ldp-quantized' must be an integer .*'abc'")
    cli_error(capsys, "estimate", "--statistic", "auc", "--protocol", "pairs-2pc",
              "--param", "P=two", match=r"parameter 'P' of protocol 'pairs-2pc' must be an "
                                        r"integer, got 'two'")


def test_cli_unknown_parameter_names_the_protocol_and_lists_the_valid_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--protocol", "ldp-tree",
              "--param", "kk=3",
              match=r"protocol 'ldp-tree' has no parameter 'kk'; its parameters are: d, "
                    r"split, a, noise, bounds, oracle, max_report_bits, recursion$")


def test_cli_noise_as_a_parameter_points_to_the_option(
        capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--param", "noise=deployment",
              match=r"choose the noise with --noise simulation\|deployment")


def test_cli_file_that_is_a_directory_or_missing(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--file", str(tmp_path),
              "--columns", "score,label", match=r"--file .* is a directory")
    cli_error(capsys, "estimate", "--statistic", "auc", "--file", str(tmp_path / "no.csv"),
              "--columns", "score,label", match=r"no such file: .*no.csv")


def test_cli_malformed_csv_column(capsys: pytest.CaptureFixture[str],
                                  scores_csv: Path) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--file", str(scores_csv),
              "--columns", "word,label",
              match=r"scores.csv, line 2, column 'word': the non-numeric value 'a'")


def test_cli_empty_csv(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("score,label\n")
    cli_error(capsys, "estimate", "--statistic", "auc", "--file", str(path),
              "--columns", "score,label", match=r"empty")


def test_cli_option_the_protocol_does_not_take(capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--precision", "16",
              match=r"--precision is not a parameter of central-laplace \(its parameters: "
                    r"design, noise\)")
    cli_error(capsys, "estimate", "--statistic", "auc", "--bounds", "0,1",
              match=r"--bounds is used by protocols that take public bounds, and "
                    r"central-laplace takes none")


def test_cli_bounds_reach_a_protocol_that_takes_them(capsys: pytest.CaptureFixture[str]) -> None:
    # Scores of breast_cancer_scores lie in [0, 1]; bounds that exclude some are refused by
    # the protocol's own record check, which shows they reached it.
    cli_error(capsys, "estimate", "--statistic", "auc", "--protocol", "ldp-quantized",
              "--bounds", "0.2,0.3", match=r"outside the declared bounds")
    assert main(["estimate", "--statistic", "auc", "--protocol", "ldp-quantized",
                 "--bounds", "0,1", "--format", "json"]) == 0


def test_cli_precision_reaches_a_protocol_that_takes_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    entry = registry._entry("central-laplace")
    original = entry.factory

    def with_precision(kernel: Kernel, *, epsilon: float, delta: float = 0.0,
                       precision: int = 24, noise: Any = None) -> Any:
        seen["precision"] = precision
        return original(kernel, epsilon=epsilon, delta=delta, noise=noise)

    monkeypatch.setitem(registry._REGISTRY, "central-laplace",
                        registry.ProtocolEntry("central-laplace", with_precision, entry.model,
                                               entry.summary, entry.source))
    assert main(["estimate", "--statistic", "auc", "--precision", "12"]) == 0
    assert seen == {"precision": 12}


def test_cli_seed_with_deployment_noise_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--noise", "deployment", "--seed", "1",
              match=r"--seed cannot be used with --noise deployment")


@pytest.mark.parametrize("command", [["compare"], ["reproduce", "--list"]])
def test_cli_studies_refuse_deployment_noise(capsys: pytest.CaptureFixture[str],
                                             command: list[str]) -> None:
    cli_error(capsys, *command, "--noise", "deployment",
              match=rf"fedustat {command[0]} runs seeded simulations .* supports --noise "
                    r"simulation only")


def test_cli_deployment_release_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("opendp")
    assert main(["estimate", "--statistic", "auc", "--noise", "deployment"]) == 0
    out = capsys.readouterr().out
    assert "(epsilon=1, delta=0)" in out and "seed=" not in out
    assert "noise: deployment noise: OS CSPRNG" in out
    assert "privacy: (eps=1) central DP" in out
    assert "trust assumptions: " in out
    assert main(["estimate", "--statistic", "auc", "--noise", "deployment", "--protocol",
                 "ldp-quantized", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["noise"] == "deployment" and row["protocol"] == "ldp-quantized"


def test_cli_simulation_release_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--statistic", "auc"]) == 0
    out = capsys.readouterr().out
    assert "seed=0: a simulation study, not a protection" in out
    assert "noise: simulation noise" in out and "NOT a protection" in out


@pytest.mark.parametrize(("argv", "match"), [
    (["--bounds", "10,0", "--statistic", "gini"], "error: --bounds must satisfy LO < HI"),
    (["--statistic", "gini", "--protocol", "ldp-quantized", "--param", "k=1000000000"],
     "above the limit 1048576"),
])
def test_cli_in_a_real_process(argv: list[str], match: str) -> None:
    done = subprocess.run([sys.executable, "-m", "fedustat.cli", "estimate", *argv],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0]


@pytest.mark.parametrize("name", NAMES)
def test_cli_unknown_parameter_for_every_protocol(capsys: pytest.CaptureFixture[str],
                                                  name: str) -> None:
    valid = ", ".join(registry.parameters(name))
    cli_error(capsys, "estimate", "--statistic", "auc", "--protocol", name,
              "--param", "bogus=1",
              match=rf"auc with protocol {name}: protocol '{name}' has no parameter 'bogus'; "
                    rf"its parameters are: {re.escape(valid)}$")


@pytest.mark.parametrize("name", WITH_NUMBERS)
def test_cli_non_numeric_parameter_for_every_protocol(capsys: pytest.CaptureFixture[str],
                                                      name: str) -> None:
    key = numeric_parameter(name)
    cli_error(capsys, "estimate", "--statistic", "auc", "--protocol", name,
              "--param", f"{key}=abc",
              match=rf"parameter '{key}' of protocol '{name}' must be .*got 'abc'$")


def test_cli_bounds_and_column_bounds_together(capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--protocol", "ldp-quantized",
              "--bounds", "0,1", "--column-bounds", "score=0,1",
              match=r"either with --bounds LO,HI or per column with --column-bounds, not both")


def test_cli_bounds_with_every_statistic_go_to_gini_and_variance_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    rows = json.loads(run_cli(capsys, "estimate", "--protocol", "ldp-quantized",
                              "--bounds", "10,60", "--format", "json"))
    names = [r["statistic"] for r in rows]
    # AUC's scores lie in [0, 1]: had (10, 60) reached its protocol, it would be refused.
    assert {"auc", "gini", "variance"} <= set(names)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


# ------------------------------------------------------------------ sizes, refused early


def refused_before_allocating(call: typing.Callable[[], Any], match: str,
                              error: type[Exception] = ValueError) -> str:
    """``call`` raises ``error`` matching ``match`` having traced less than 8 MiB."""
    tracemalloc.start()
    try:
        with pytest.raises(error, match=match) as info:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB allocated before the refusal"
    message = str(info.value)
    assert "\n" not in message
    return message


X = np.random.default_rng(3).uniform(0.0, 1.0, 60)
Y = (np.arange(60) % 2).astype(float)


def test_ecdf_grid_above_the_cap_is_refused_with_the_cap_and_its_reason() -> None:
    for points in (2**25, 10**9):
        message = refused_before_allocating(
            lambda p=points: fedustat.ecdf(X, epsilon=1.0, bounds=(0, 1), grid_points=p, rng=0),
            rf"^grid_points: a grid of {points} points is above 1048576 \(2\^20\), the largest "
            r"the central ECDF release takes, to keep a call under about 1 GiB of memory: ")
        assert "387 MiB and 2.2 s measured at 2^20 points" in message
    with pytest.raises(ValueError, match=r"^thresholds: a grid of 1048577 points is above"):
        fedustat.ecdf(X, epsilon=1.0, thresholds=np.linspace(0, 1, 2**20 + 1), rng=0)
    ECDF_GRID_LIMIT.check(2**20, "grid_points")  # the cap itself passes


def test_federated_and_roc_grids_have_their_own_caps() -> None:
    refused_before_allocating(
        lambda: fedustat.ecdf(X, epsilon=1.0, bounds=(0, 1), grid_points=4097,
                              protocol="ecdf-secagg", rng=0),
        r"^grid_points: a grid of 4097 points is above 4096 \(2\^12\), the largest a "
        r"federated ECDF release run in one process takes")
    refused_before_allocating(
        lambda: registry.make_curve("ecdf-fss", epsilon=1.0, bounds=(0, 1), precision=1e-9),
        r"^precision: a grid of 1000000001 points is above 4096")
    refused_before_allocating(
        lambda: fedustat.roc_curve(Y, X, epsilon=1.0, bounds=(0, 1), grid_points=2**16 + 1,
                                   rng=0),
        r"^grid_points: a grid of 65537 points is above 65536 \(2\^16\), the largest the "
        r"ROC curve release takes")


def test_quantile_levels_and_grid_are_capped_by_their_work() -> None:
    message = refused_before_allocating(
        lambda: fedustat.quantile(X, np.linspace(0.01, 1.0, 10**5), epsilon=1.0,
                                  bounds=(0, 1), rng=0),
        r"^q: 100000 levels on a grid of 1024 points are more than one release answers")
    assert "ask for at most 256 levels on this grid" in message
    refused_before_allocating(
        lambda: fedustat.quantile(X, 0.5, epsilon=1.0, bounds=(0, 1), grid_points=2**17,
                                  rng=0),
        r"^grid_points: a grid of 131072 points is above 16384 \(2\^14\), the largest the "
        r"quantile release takes")
    # fedustat.estimate passes bounds on as fedustat.quantile takes them (same refusal).
    with pytest.raises(ValueError, match=r"^q: 100000 levels on a grid of 1024 points"):
        fedustat.estimate("quantile", X, epsilon=1.0, bounds=(0, 1),
                          levels=np.linspace(0.01, 1.0, 10**5), rng=0)
    check_quantile_size(256, 1024)  # 256 levels on 1024 points: at the cap
    with pytest.raises(ValueError, match=r"257 levels on a grid of 1024 points"):
        check_quantile_size(257, 1024)


def test_quantile_interval_is_capped() -> None:
    curve = dp_ecdf(X, np.linspace(0, 1, 2**14), epsilon=1.0, rng=0, method="003-tree")
    refused_before_allocating(
        lambda: quantile_interval(curve, np.linspace(0.001, 1.0, 2**13)),
        r"^q: 8192 levels on a grid of 16384 points are 134217728 level-point pairs, above "
        r"67108864 \(2\^26\)")


def test_hosmer_lemeshow_groups_and_grid_are_checked_by_their_own_names() -> None:
    refused_before_allocating(
        lambda: fedustat.hosmer_lemeshow(Y, X, epsilon=1.0, n_groups=10**9, rng=0),
        r"^n_groups=1000000000 groups for 60 records: some groups would be empty whatever "
        r"the data; use at most 60 groups")
    with pytest.raises(ValueError, match=r"^n_groups=50 groups for 6 records: .* use at most "
                                         r"6 groups"):
        fedustat.hosmer_lemeshow(Y[:6], X[:6], epsilon=1.0, n_groups=50, rng=0)
    with pytest.raises(ValueError, match=r"^fedustat.hosmer_lemeshow\(\): n_groups must be at "
                                         r"least 3 \(the test has n_groups - 2 degrees of "
                                         r"freedom; 10 is customary\), got 2$"):
        fedustat.hosmer_lemeshow(Y, X, epsilon=1.0, n_groups=2, rng=0)
    with pytest.raises(ValueError, match=r"^n_groups=20 groups on a grid of 16 predicted "
                                         r"probabilities"):
        fedustat.hosmer_lemeshow(Y, X, epsilon=1.0, n_groups=20, gamma=1 / 16, rng=0)
    refused_before_allocating(
        lambda: fedustat.hosmer_lemeshow(Y, X, epsilon=1.0, gamma=2.0**-30, rng=0),
        r"^gamma: a grid of 1073741824 points is above 1048576")
    with pytest.raises(ValueError, match=r"^gamma=2.0 is above 1"):
        fedustat.hosmer_lemeshow(Y, X, epsilon=1.0, gamma=2.0, rng=0)
    # The protocol layer names its own argument, Q.
    with pytest.raises(ValueError, match=r"^Q must be >= 3, got 2$"):
        dp_hosmer_lemeshow(Y, X, epsilon=1.0, Q=2)


def test_hosmer_lemeshow_refuses_a_grid_it_would_ignore() -> None:
    for key in ("thresholds", "bounds", "grid_points"):
        with pytest.raises(TypeError, match=rf"^fedustat.hosmer_lemeshow\(\) takes no {key}=: "
                                            r"the cut points come from"):
            fedustat.hosmer_lemeshow(Y, X, epsilon=1.0, rng=0, **{key: [0.5]})
    data = np.column_stack([X, Y])
    for key in ("thresholds", "bounds", "levels"):
        with pytest.raises(TypeError, match=rf"^fedustat.estimate\('hl'\): {key}= is not an "
                                            r"argument of the Hosmer-Lemeshow release"):
            fedustat.estimate("hl", data, epsilon=1.0, rng=0, **{key: (0.0, 1.0)})
    with pytest.raises(ValueError, match=r"^hl takes no thresholds"):
        release_curve("hl", [X, Y], epsilon=1.0, thresholds=[0.5], rng=0)
    with pytest.raises(ValueError, match=r"^levels are for quantile releases, not roc"):
        release_curve("roc", [X, Y], epsilon=1.0, thresholds=[0.5, 1.0], levels=[0.5], rng=0)


# ------------------------------------------------------------------ fixed-point precision


@pytest.mark.parametrize("name", ["umpc", "pairs-2pc"])
@pytest.mark.parametrize("precision", [10.0, 1.0])
def test_precision_not_below_the_width_is_refused(name: str, precision: float) -> None:
    # Before, every score encoded to 0 or 1: the AUC tied everywhere (0.5, s.e. 0).
    with pytest.raises(ValueError, match=rf"^precision={precision!r} is not below the width 1 "
                                         r"of the bounds: every value would encode to one of "
                                         r"at most two codes"):
        fedustat.roc_auc_score(Y, X, epsilon=1.0, protocol=name, bounds=(0, 1),
                               precision=precision, rng=0)


def test_precision_of_a_federated_grid_not_below_the_width_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^precision=2.0 is not below the width 1 of the "
                                         r"bounds \[0, 1\]"):
        registry.make_curve("ecdf-secagg", epsilon=1.0, bounds=(0, 1), precision=2.0)


def test_precision_needing_more_bits_than_the_ring_is_refused_by_name() -> None:
    with pytest.raises(InputRangeError, match=r"^precision=1e-300 needs 997 fractional bits"):
        fedustat.roc_auc_score(Y, X, epsilon=1.0, protocol="umpc", bounds=(0, 1),
                               precision=1e-300, rng=0)


def test_bounds_narrower_than_one_get_a_ring_that_holds_their_codes() -> None:
    # Codes below 2^c (bounds of width 0.1): the ring was sized below c + 2 bits and the
    # run failed with "frac_bits must be < bits".
    data = np.clip(X * 0.1, 0.0, 0.1)
    release = fedustat.roc_auc_score(Y, data, epsilon=1.0, protocol="pairs-2pc",
                                     bounds=(0, 0.1), rng=0)
    assert math.isfinite(release.value)


@pytest.mark.parametrize("name", ["umpc", "pairs-2pc"])
def test_rounding_bias_enters_the_stated_error_when_not_negligible(name: str) -> None:
    coarse = fedustat.gini_mean_difference(X, bounds=(0, 1), epsilon=1.0, protocol=name,
                                           precision=0.3, rng=0)
    # h = 0.25: |x - y| moves by at most h, so the Gini mean difference by at most 0.25.
    assert coarse.diagnostics["encoding"]["rounding_bias_bound"] == 0.25
    assert isinstance(coarse.error, BoundedBias) and coarse.error.bound == 0.25
    assert "bias within ±0.25" in str(coarse.error)
    fine = fedustat.gini_mean_difference(X, bounds=(0, 1), epsilon=1.0, protocol=name,
                                         rng=0)
    # The default precision (width / 2^20): a bound far below the noise, not added.
    assert fine.diagnostics["encoding"]["rounding_bias_bound"] == 2.0**-20
    assert not isinstance(fine.error, BoundedBias)


@pytest.mark.parametrize(("kernel", "h"), [("gini_mean_difference", 0.125),
                                           ("variance", 0.125)])
def test_rounding_bias_bound_holds_for_the_encoded_values(kernel: str, h: float) -> None:
    # The U-statistic of the rounded codes is within the bound of the exact one, on data
    # that round as badly as possible (every value half a step from a code).
    encoding = ColumnEncoding.declare((0.0, 1.0), h, 1)
    bound = encoding.rounding_bias(kernel)
    gen = np.random.default_rng(11)
    for _ in range(50):
        x = np.clip(gen.integers(0, 8, 40) * h + gen.choice([-1, 1], 40) * h * 0.499, 0, 1)
        rounded = np.round(x / h) * h
        k = (kernels.gini_kernel((0, 1)) if kernel == "gini_mean_difference"
             else kernels.variance_kernel((0, 1)))
        exact = fedustat.estimate(k, x[:, None], epsilon=math.inf).value
        coded = fedustat.estimate(k, rounded[:, None], epsilon=math.inf).value
        assert abs(coded - exact) <= bound


def test_ghazi_shuffle_states_its_encoding_error() -> None:
    release = fedustat.gini_mean_difference(X, bounds=(0, 1), epsilon=1.0,
                                            protocol="ghazi-shuffle", k=8, frac_bits=0, rng=0)
    assert isinstance(release.error, BoundedBias)
    assert release.error.bound == pytest.approx(release.diagnostics["encoding_error"])


def test_ring_overflows_are_value_errors_naming_the_fix() -> None:
    with pytest.raises(ValueError, match=r"declare a coarser precision") as info:
        fedustat.roc_auc_score(Y, X, epsilon=1.0, protocol="umpc", bounds=(0, 1e30),
                               precision=1e-12, rng=0)
    assert isinstance(info.value, OverflowError)  # still an OverflowError, as before


# ------------------------------------------------------------------ silently accepted before


def test_complex_scores_are_refused() -> None:
    with pytest.raises(TypeError, match=r"^fedustat.roc_auc_score\(\): y_score contains "
                                        r"complex numbers"):
        fedustat.roc_auc_score(Y, X + 1j, epsilon=1.0, rng=0)
    with pytest.raises(TypeError, match=r"^x contains complex numbers"):
        fedustat.gini_mean_difference(X + 0j, bounds=(0, 1), epsilon=1.0, rng=0)
    with pytest.raises(TypeError, match=r"^values must be numeric, got text"):
        as_float_array(["0.5", "0.7"], "values")


@pytest.mark.parametrize("call", [
    lambda: fedustat.roc_auc_score(Y, X, epsilon="1", rng=0),
    lambda: fedustat.ecdf(X, epsilon="1", bounds=(0, 1), rng=0),
    lambda: registry.make("umpc", auc_kernel(), epsilon="1"),
])
def test_a_string_epsilon_is_refused(call: typing.Callable[[], Any]) -> None:
    with pytest.raises(TypeError, match=r"^epsilon must be a positive number, got '1' \(text, "
                                        r"not a number\); pass a number such as epsilon=1.0$"):
        call()


def test_central_laplace_refuses_a_delta_it_would_ignore() -> None:
    with pytest.raises(ValueError, match=r"^delta=1e-05: central-laplace is pure epsilon-DP "
                                         r"with these parameters \(its releases carry delta "
                                         r"= 0\) and would not use it; pass delta=0"):
        fedustat.roc_auc_score(Y, X, epsilon=1.0, delta=1e-5, rng=0)


def test_an_asymmetric_user_kernel_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"^func is not symmetric in its arguments: on the "
                                         r"probe tuple .* with arguments 1 and 2 swapped"):
        user_kernel(lambda a, b: (a[:, 0] > b[:, 0]).astype(float), 2, "x", (0.0, 1.0))
    with pytest.raises(ValueError, match=r"arguments 2 and 3 swapped"):
        user_kernel(lambda a, b, c: a[:, 0] * b[:, 0] - c[:, 0], 3, "x", (-1.0, 1.0))
    symmetric = user_kernel(lambda a, b, c: np.maximum.reduce([a, b, c])[:, 0], 3, "x",
                            (0.0, 1.0))
    assert symmetric.degree == 3


def test_negative_and_boolean_seeds_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^rng must be a non-negative integer seed, got -1"):
        fedustat.roc_auc_score(Y, X, epsilon=1.0, rng=-1)
    with pytest.raises(TypeError, match=r"^rng must be None, a non-negative integer seed or a "
                                        r"numpy.random.Generator, got the boolean True"):
        fedustat.roc_auc_score(Y, X, epsilon=1.0, rng=True)


# ------------------------------------------------------------------ poor errors before


def test_a_budget_outside_the_range_a_release_takes_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^epsilon=1e-300 is below 1e-06, the smallest "
                                         r"budget a release takes: .*; use epsilon >= 1e-06$"):
        fedustat.roc_auc_score(Y, X, epsilon=1e-300, rng=0)
    with pytest.raises(ValueError, match=r"^epsilon=1e\+308 is above 1000, the largest finite "
                                         r"budget .*or epsilon=math.inf for the exact value$"):
        fedustat.ecdf(X, epsilon=1e308, bounds=(0, 1), rng=0)
    for eps in (SMALLEST_EPSILON, LARGEST_EPSILON):
        assert math.isfinite(fedustat.roc_auc_score(Y, X, epsilon=eps, rng=0).value)


def test_bounds_beyond_float_range_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^bounds \(0, 1e\+308\) reach beyond \+-1e\+100: the "
                                         r"noise scale \(hi - lo\) / epsilon and its square "
                                         r"would overflow float64"):
        fedustat.gini_mean_difference(X, bounds=(0, 1e308), epsilon=1.0, rng=0)


def test_reversed_quantile_bounds_are_blamed_on_bounds() -> None:
    # Before: "thresholds must be strictly increasing" (the grid made from them).
    with pytest.raises(ValueError, match=r"^bounds must be finite with lower < upper, got "
                                         r"\(1, 0\)"):
        fedustat.estimate("quantile", X, epsilon=1.0, bounds=(1, 0), rng=0)


def test_advanced_composition_beyond_float_range_names_epsilon() -> None:
    with pytest.raises(ValueError, match=r"^epsilon=1000 per step: the advanced composition "
                                         r"bound .* overflows float64"):
        advanced_composition(1000.0, 0.0, 10, 1e-6)
    step, _ = per_step_budget_advanced(1000.0, 1e-6, 3)  # e^eps overflowed the bracket
    assert step < 1000.0 and _advanced_composed(step, 3, 1e-6) <= 1000.0


def _advanced_composed(step: float, k: int, slack: float) -> float:
    return advanced_composition(step, 0.0, k, slack).epsilon


def test_cli_negative_seed(capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--seed", "-1",
              match=r"^error: --seed must be a non-negative integer, got -1$")
    cli_error(capsys, "compare", "--statistic", "auc", "--seed", "-1",
              match=r"^error: --seed must be a non-negative integer, got -1$")


def test_cli_grid_points_above_the_cap_are_refused_before_the_grid(
        capsys: pytest.CaptureFixture[str]) -> None:
    for points in (4194304, 1000000000):
        refused_before_allocating(
            lambda p=points: main(["estimate", "--statistic", "ecdf", "--param",
                                   f"grid_points={p}"]),
            rf"^error: --param grid_points: a grid of {points} points is above",
            SystemExit)
        assert "Traceback" not in capsys.readouterr().err
    cli_error(capsys, "estimate", "--statistic", "ecdf", "--param", "grid_points=4194304",
              match=r"^error: --param grid_points: a grid of 4194304 points is above 1048576")
    cli_error(capsys, "estimate", "--statistic", "quantile", "--param", "grid_points=65536",
              match=r"^error: --param grid_points: a grid of 65536 points is above 16384")
    cli_error(capsys, "compare", "--statistic", "ecdf", "--grid-points", "1000000000",
              match=r"^error: --grid-points 1000000000 is above 4096")


def test_cli_budget_outside_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    cli_error(capsys, "estimate", "--statistic", "auc", "--epsilon", "1e-300",
              match=r"^error: --epsilon=1e-300 is below 1e-06")
    cli_error(capsys, "estimate", "--statistic", "auc", "--delta", "1e-6",
              match=r"delta=1e-06: central-laplace is pure epsilon-DP")


#: Parameters a protocol needs to build with its defaults.
_PURE_DEFAULTS = {"ldp-tree": {"d": 16}, "ldp-quantized": {"bounds": (0.0, 1.0)}}


@pytest.mark.filterwarnings("ignore:auc. no bounds declared:UserWarning")
@pytest.mark.parametrize("name", [e.name for e in registry.available()
                                  if e.name not in ("exact", "fedauc-gaussian",
                                                    "ghazi-shuffle")])
def test_a_pure_protocol_refuses_a_delta_it_would_ignore(name: str) -> None:
    # Built with delta = 0 it states the same pure guarantee: the delta would change
    # nothing, so it is refused by name (one rule in registry.make, every path).
    kernel = gini_kernel((0.0, 1.0)) if name == "ldp-ghazi" else auc_kernel()  # one grid
    params = _PURE_DEFAULTS.get(name, {})
    assert registry.make(name, kernel, epsilon=1.0, **params).planned_guarantee().delta == 0
    with pytest.raises(ValueError, match=rf"^delta=1e-06: {name} is pure epsilon-DP with "
                                         r"these parameters \(its releases carry delta = 0\)"):
        registry.make(name, kernel, epsilon=1.0, delta=1e-6, **params)


def test_a_delta_the_parameters_use_is_kept() -> None:
    kernel = auc_kernel()
    # The Gaussian mechanism, and advanced composition over the tree's levels (which
    # needs a delta even where it then falls back to the basic split).
    assert registry.make("fedauc-gaussian", kernel, epsilon=1.0,
                         delta=1e-6).guarantee.delta == 1e-6
    assert registry.make("fedauc-laplace", kernel, epsilon=1.0, delta=1e-6,
                         mechanism="gaussian").guarantee.delta > 0
    registry.make("ldp-tree", kernel, epsilon=1.0, delta=1e-3, d=64, split="budget-advanced")
