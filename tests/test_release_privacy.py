"""A release carries nothing private: every field that depends on the data is a DP output.

For every registered protocol and every release function (``release_cases``), the release
is computed on a data set D and on a neighbour D' (one record replaced under the
release's adjacency) with the same seed; every field that differs must be one the release
documents as a DP output or computed from DP outputs alone (``released_fields``, also
stated on each protocol's docs page). A second run on D with another seed catches what
depends on the randomness only, such as raw noise draws, shares or keys: those fields
must also be DP outputs, or public coins (``public_coin_fields``: a sampled design, a
simulated client split), never secrets of the run.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import fedustat
import release_cases as rc
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate
from fedustat.stats.kernels import PublicData, user_kernel

CASES = rc.all_cases()
DOCS = Path(__file__).resolve().parents[1] / "docs" / "protocols"
SEED, OTHER_SEED = 11, 12


def _is_private(release: object) -> bool:
    privacy = getattr(release, "privacy", None)
    return not (isinstance(privacy, PrivacyGuarantee) and privacy.model is PrivacyModel.NONE)


def test_every_registered_protocol_has_a_case() -> None:
    covered = {case.name.split("[")[0] for case in CASES}
    missing = {entry.name for entry in registry.available()} - covered
    assert not missing, f"add release cases for {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fields_that_depend_on_the_data_are_dp_outputs(case: rc.ReleaseCase) -> None:
    assert not np.array_equal(case.data, case.neighbour)
    moved = False
    # A local randomizer may map both records to the same report for one seed; a few
    # seeds make sure the neighbour moves the release at least once.
    for seed in range(SEED, SEED + 12):
        first = case.run(case.data, seed)
        if not _is_private(first):
            pytest.skip("an exact, non-private release: every field may depend on the data")
        second = case.run(case.neighbour, seed)
        moved = moved or rc.leaked_fields(first, second, ()) != []
        leaks = rc.leaked_fields(first, second, case.released_fields)
        assert leaks == [], (f"{case.name}: fields that differ between neighbouring data sets "
                             f"but are not documented DP outputs: {leaks}")
    assert moved, "the neighbour changed no field of the release: the case tests nothing"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fields_that_depend_on_the_randomness_are_dp_outputs_or_public_coins(
        case: rc.ReleaseCase) -> None:
    first = case.run(case.data, SEED)
    if not _is_private(first):
        pytest.skip("an exact, non-private release")
    second = case.run(case.data, OTHER_SEED)
    leaks = rc.leaked_fields(first, second, case.released_fields + case.public_coin_fields)
    assert leaks == [], (f"{case.name}: fields that change with the seed but are neither DP "
                         f"outputs nor public coins (noise draws, shares or keys?): {leaks}")


def test_the_check_finds_a_planted_leak() -> None:
    guarantee = PrivacyGuarantee(1.0, 0.0, PrivacyModel.CENTRAL)

    def release(data: np.ndarray, seed: int) -> Estimate:
        noise = np.random.default_rng(seed).laplace()
        return Estimate(float(np.mean(data)) + noise, "mean", "leaky", guarantee,
                        diagnostics={"exact_mean": float(np.mean(data)), "noise": noise,
                                     "n": data.size})

    data, neighbour = np.zeros(10), np.r_[np.zeros(9), 1.0]
    released = ("value",)
    assert rc.leaked_fields(release(data, 1), release(neighbour, 1), released) == [
        "diagnostics.exact_mean"]
    assert rc.leaked_fields(release(data, 1), release(data, 2), released) == [
        "diagnostics.noise"]


def test_flatten_reaches_nested_objects() -> None:
    class Keys:
        def __init__(self) -> None:
            self.seed = np.arange(3)

    flat = rc.flatten({"a": [Keys(), (1.0, 2.0)], "b": math.nan})
    assert set(flat) == {"a.0.seed", "a.1", "b"}
    assert rc.same(flat["b"], math.nan)


def _docs_page(case_name: str) -> Path:
    name = case_name.split("[")[0]
    if name.startswith("fedauc"):
        page = "fedauc"
    elif name in ("exact",):
        page = "central-laplace"
    elif name.startswith("ecdf") or name.startswith(("dp_", "smooth", "isotonic", "pointwise",
                                                     "fss_", "fedustat.")):
        # "fedustat.": the one-call curve functions (fedustat.curves)
        page = "ecdf"
    elif name == "roc_auc_score":
        page = "central-laplace"
    else:
        page = name
    return DOCS / f"{page}.md"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_docs_page_states_the_released_fields(case: rc.ReleaseCase) -> None:
    text = _docs_page(case.name).read_text()
    assert "## What a release contains" in text
    section = text[text.index("## What a release contains"):]
    missing = [f for f in case.released_fields + case.public_coin_fields
               if f"`{f}`" not in section]
    assert missing == [], f"{_docs_page(case.name).name} does not list {missing}"


def test_a_user_statistic_map_sees_only_public_data() -> None:
    seen: list[object] = []

    def reads_the_records(u: float, public: PublicData) -> float:
        seen.append(public)
        return float(np.max(public.column("x")))  # the largest record: private

    kernel = user_kernel(lambda a, b: np.abs(a[:, 0] - b[:, 0]), 2, "x", (0.0, 1.0),
                         statistic_fn=reads_the_records)
    x = np.random.default_rng(0).random((50, 1))
    for protocol in ("central-laplace", "ldp-quantized", "ldp-ghazi"):
        params = {} if protocol == "central-laplace" else {"k": 8, "bounds": (0.0, 1.0)}
        with pytest.raises(ValueError, match="column 'x' is not public"):
            fedustat.estimate(kernel, x, protocol=protocol, epsilon=1.0, rng=0, **params)
    assert seen and all(isinstance(p, PublicData) for p in seen)

    def scaled(u: float, public: PublicData) -> float:
        return u * public.n

    ok = user_kernel(lambda a, b: np.abs(a[:, 0] - b[:, 0]), 2, "x", (0.0, 1.0),
                     statistic_fn=scaled)
    exact = fedustat.estimate(ok, x, protocol="exact", epsilon=math.inf)
    pairs = np.abs(x[:, None, 0] - x[None, :, 0])[np.triu_indices(50, 1)]
    assert exact.value == pytest.approx(pairs.mean() * 50, rel=1e-12)
