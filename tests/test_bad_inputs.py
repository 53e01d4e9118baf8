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
import typing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedustat
from fedustat.cli import main
from fedustat.protocols import registry
from fedustat.stats import auc_kernel, gini_kernel
from fedustat.stats.kernels import Kernel

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
                    r"split, a, noise, bounds, oracle, max_report_bits$")


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
