"""The coverage harness (``coverage_check.py``) accepts right intervals and rejects wrong ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coverage_check import Coverage, assert_covers, measure_coverage
from fedustat.privacy.errors import LaplaceError, NormalError
from fedustat.privacy.guarantee import PrivacyGuarantee
from fedustat.protocols.base import Estimate

RUNS = 20_000


def _release(seed: int, error: object) -> Estimate:
    z = np.random.default_rng(seed).laplace(0.0, 1.0)
    if isinstance(error, NormalError):
        return Estimate(z, "x", "toy", PrivacyGuarantee(1.0), std_error=error.sigma)
    return Estimate(z, "x", "toy", PrivacyGuarantee(1.0), error=error)  # type: ignore[arg-type]


def test_the_exact_laplace_interval_passes() -> None:
    result = measure_coverage(lambda s: _release(s, LaplaceError(1.0)), 0.0, RUNS)
    assert_covers(result, exact_interval=True)


def test_the_normal_interval_on_laplace_noise_fails() -> None:
    # 1.96 sd of Laplace(1) covers 1 - exp(-1.96 sqrt 2) = 93.7%: caught with 20,000 runs.
    result = measure_coverage(lambda s: _release(s, NormalError(math.sqrt(2.0))), 0.0, RUNS)
    assert result.share == pytest.approx(1 - math.exp(-1.96 * math.sqrt(2)), abs=0.006)
    with pytest.raises(AssertionError, match="too low"):
        assert_covers(result)


def test_a_too_wide_interval_fails_only_when_declared_exact() -> None:
    result = Coverage(covered=990, runs=1000, level=0.95)
    assert_covers(result)
    with pytest.raises(AssertionError, match="too high"):
        assert_covers(result, exact_interval=True)
