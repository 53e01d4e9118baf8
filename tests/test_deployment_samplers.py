"""Tests for the fixed-work deployment samplers (fedustat.privacy.samplers, DeploymentNoise).

Deployment noise cannot be seeded, so the laws are checked with enough draws and
tolerances from the sampling distribution: chi-square goodness of fit at false-alarm
probability ALPHA = 1e-7 per test (critical value ``chi2.isf(ALPHA, df)``), and a sample
mean within 5 standard errors (two-sided false alarm 5.7e-7 by the normal approximation).
The value-independence of the work is checked structurally: the CSPRNG entry point
``samplers.random_words`` is replaced by a counter that returns constant words, and every
sampler must ask for the same number of words whether the words push its output to one
extreme, to the other, or come from the real CSPRNG.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from fedustat.privacy import samplers
from fedustat.privacy.noise import DeploymentNoise

ALPHA = 1e-7
TWO_64 = 2.0**64


def chi_square_ok(counts: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """Chi-square statistic of ``counts`` against ``probs`` and its critical value."""
    probs = np.asarray(probs, dtype=float)
    assert abs(probs.sum() - 1.0) < 1e-9
    expected = counts.sum() * probs
    assert expected.min() >= 5, "pool the bins: expected counts must be >= 5"
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, float(stats.chi2.isf(ALPHA, probs.size - 1))


def integer_bins(draws: np.ndarray, pmf: Callable[[np.ndarray], np.ndarray], lo: int,
                 hi: int, two_sided: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Counts and probabilities on ``{lo, ..., hi}``, tails pooled into end bins.

    ``two_sided=False``: ``lo`` is the least value of the support (no lower pool).
    """
    ks = np.arange(lo, hi + 1)
    probs = pmf(ks)
    counts = np.array([(draws == k).sum() for k in ks], dtype=float)
    mass_below = float(pmf(np.arange(lo - 400, lo)).sum()) if two_sided else 0.0
    mass_above = 1.0 - probs.sum() - mass_below
    counts = np.concatenate([counts, [(draws > hi).sum()]])
    probs = np.concatenate([probs, [mass_above]])
    if not two_sided:
        assert (draws >= lo).all()
        return counts, probs
    return (np.concatenate([[(draws < lo).sum()], counts]),
            np.concatenate([[mass_below], probs]))


@pytest.fixture(scope="module")
def noise() -> DeploymentNoise:
    return DeploymentNoise()


# ------------------------------------------------------------------------ the laws
def test_discrete_laplace_law(noise):
    scale = 3.0
    t = math.exp(-1 / scale)
    draws = noise.discrete_laplace(scale, 200_000)
    assert draws.dtype == np.int64

    def pmf(k: np.ndarray) -> np.ndarray:  # (1-t)/(1+t) t^|k| (002 App. B.1.1)
        return (1 - t) / (1 + t) * t ** np.abs(k)

    stat, crit = chi_square_ok(*integer_bins(draws, pmf, -15, 15))
    assert stat < crit


def test_geometric_law_small_scale():
    scale = 0.7
    q = math.exp(-1 / scale)
    draws = samplers.geometric(scale, 100_000)
    assert draws.min() >= 0

    stat, crit = chi_square_ok(*integer_bins(draws, lambda k: (1 - q) * q ** k, 0, 5,
                                             two_sided=False))
    assert stat < crit


@pytest.mark.parametrize(("r", "alpha"), [(0.25, 0.7), (1.0, math.exp(-0.2)), (3.5, 0.4)])
def test_polya_law(noise, r, alpha):
    draws = noise.polya(r, alpha, 100_000)
    law = stats.nbinom(r, 1 - alpha)  # Pólya(r, alpha) in SciPy's terms (mechanisms.polya)
    hi = int(law.isf(1e-3))
    counts = np.array([(draws == k).sum() for k in range(hi + 1)] + [(draws > hi).sum()],
                      dtype=float)
    probs = np.concatenate([law.pmf(np.arange(hi + 1)), [law.sf(hi)]])
    stat, crit = chi_square_ok(counts, probs)
    assert stat < crit


def test_polya_shares_sum_to_geometric(noise):
    # 002 Protocol B.1: the sum of n i.i.d. Pólya(1/n, t) is Pólya(1, t), a geometric.
    n, t = 8, math.exp(-0.5)
    total = noise.polya(1 / n, t, (40_000, n)).sum(axis=1)
    stat, crit = chi_square_ok(*integer_bins(total, lambda k: (1 - t) * t ** k, 0, 12,
                                             two_sided=False))
    assert stat < crit


def test_gaussian_law(noise):
    sigma = 2.0
    draws = noise.gaussian(sigma, 40_000)
    grid = 2.0**-9  # sigma = 2 is 2^10 grid units
    assert samplers.gaussian_grid(sigma) == grid
    np.testing.assert_array_equal(draws, np.round(draws / grid) * grid)  # grid multiples
    # Equiprobable bins of N(0, sigma²); the grid (sigma/1024) moves each edge's
    # probability by < 4e-4, about 1/10 of a standard error of a bin count here.
    edges = stats.norm.ppf(np.linspace(0, 1, 21)[1:-1], scale=sigma)
    counts = np.bincount(np.searchsorted(edges, draws), minlength=20).astype(float)
    stat, crit = chi_square_ok(counts, np.full(20, 0.05))
    assert stat < crit
    se = sigma / math.sqrt(draws.size)
    assert abs(draws.mean()) < 5 * se


def test_laplace_law(noise):
    scale = 1.5
    draws = noise.laplace(scale, 100_000)
    grid = 2.0**-39  # scale = 1.5 is 1.5 2^39 grid units, in [2^39, 2^40)
    assert samplers.laplace_grid(scale) == grid
    np.testing.assert_array_equal(draws, np.round(draws / grid) * grid)
    edges = stats.laplace.ppf(np.linspace(0, 1, 21)[1:-1], scale=scale)
    counts = np.bincount(np.searchsorted(edges, draws), minlength=20).astype(float)
    stat, crit = chi_square_ok(counts, np.full(20, 0.05))
    assert stat < crit


def test_uniform_and_integers_laws(noise):
    u = noise.uniform(200_000)
    assert u.min() >= 0.0 and u.max() < 1.0
    stat, crit = chi_square_ok(np.bincount((u * 20).astype(int), minlength=20).astype(float),
                               np.full(20, 0.05))
    assert stat < crit
    ints = noise.integers(7, 140_000)
    stat, crit = chi_square_ok(np.bincount(ints, minlength=7).astype(float), np.full(7, 1 / 7))
    assert stat < crit
    big = noise.integers(2**62 + 3, 1000)
    assert big.min() >= 0 and big.max() < 2**62 + 3 and big.max() > 2**60


@pytest.mark.parametrize("high", [1, 2, 7, 1000, 2**32 - 1, 2**32, 2**32 + 5, 2**63 - 1])
def test_integers_is_the_128_bit_multiply_shift(monkeypatch, high):
    # Compare the limb arithmetic with Python's exact floor(u high / 2^128) on seeded words,
    # including the extreme words 0 and 2^128 - 1.
    words = np.random.default_rng(high % 1000).integers(0, 2**64, size=(500, 2),
                                                        dtype=np.uint64)
    words[0], words[1] = 0, 2**64 - 1
    monkeypatch.setattr(samplers, "random_words", lambda c: words.reshape(-1)[:c].copy())
    expected = [((int(a) << 64 | int(b)) * high) >> 128 for a, b in words]
    assert samplers.integers(high, 500).tolist() == expected


@pytest.mark.parametrize("p", [0.05, 0.5, 0.93])
def test_bernoulli_law(noise, p):
    n = 400_000
    draws = noise.bernoulli(p, n)
    assert draws.dtype == bool
    assert abs(draws.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert not noise.bernoulli(0.0, 10).any() and noise.bernoulli(1.0, 10).all()


def test_bernoulli_threshold_is_exact(monkeypatch):
    p = 0.3
    threshold = int(p * 2**64)  # int() of the float product is exact: p is a dyadic rational
    from fractions import Fraction
    assert threshold == math.floor(Fraction(p) * 2**64)
    words = np.array([threshold - 1, threshold], dtype=np.uint64)
    monkeypatch.setattr(samplers, "random_words", lambda count: words[:count].copy())
    np.testing.assert_array_equal(samplers.bernoulli(p, 2), [True, False])


# ---------------------------------------------------------------------- tail cuts
@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0, 1e3, 2.0**39 + 1, 2.0**40])
def test_geometric_digits_cut_the_tail_below_2_to_minus_64(scale):
    digits = samplers.geometric_bits(scale)
    # q^(2^B) = exp(-2^B/scale) <= 2^-64, and B is the least such (or 1).
    assert 2.0**digits / scale >= 64 * math.log(2)
    assert digits == 1 or 2.0 ** (digits - 1) / scale < 64 * math.log(2)
    assert samplers.geometric_thresholds(scale).size == digits


def test_geometric_support_is_below_2_to_the_digits(monkeypatch):
    scale = 5.0
    digits = samplers.geometric_bits(scale)
    # Word 0 is below every (nonzero) threshold: every digit is 1, the largest value.
    monkeypatch.setattr(samplers, "random_words", lambda c: np.zeros(c, dtype=np.uint64))
    assert samplers.geometric(scale, 3).tolist() == [2**digits - 1] * 3
    monkeypatch.setattr(samplers, "random_words",
                        lambda c: np.full(c, 2**64 - 1, dtype=np.uint64))
    assert samplers.geometric(scale, 3).tolist() == [0] * 3


@pytest.mark.parametrize(("r", "alpha"), [(0.01, math.exp(-1.0)), (1.0, 0.9), (4.0, 0.5)])
def test_polya_table_tail_and_pmf(r, alpha):
    table = samplers.polya_table(r, alpha)
    lo, hi = table.support
    law = stats.nbinom(r, 1 - alpha)
    assert lo == 0 and table.tail_mass <= 2.0**-64
    assert law.sf(hi) <= 2.0**-64 * (1 + 1e-6)
    pmf = table.pmf()
    # Exact up to the renormalization (<= 2^-64) and the rounding of each threshold.
    np.testing.assert_allclose(pmf, law.pmf(np.arange(lo, hi + 1)), rtol=1e-9,
                               atol=2 * 2.0**-64)


def test_gaussian_table_tail_and_pmf():
    units = 1536.0
    table = samplers.gaussian_table(units)
    lo, hi = table.support
    assert lo == -hi and table.tail_mass <= 2.0**-64
    ks = np.arange(-hi - 40 * int(units), hi + 40 * int(units) + 1)
    weights = np.exp(-ks.astype(float) ** 2 / (2 * units**2))
    total = weights.sum()
    outside = weights[np.abs(ks) > hi].sum() / total
    assert 0 < outside <= 2.0**-64
    inside = weights[np.abs(ks) <= hi] / total
    np.testing.assert_allclose(table.pmf(), inside, rtol=1e-9, atol=2 * 2.0**-64)
    assert table.high.size + 1 <= samplers.MAX_TABLE_SIZE


# ------------------------------------------------------------------- bad parameters
@pytest.mark.parametrize(("method", "args", "exc", "match"), [
    ("laplace", (0.0, 3), ValueError, "scale must be > 0"),
    ("gaussian", (-1.0, 3), ValueError, "sigma must be > 0"),
    ("discrete_laplace", (float("inf"), 3), ValueError, "scale must be finite"),
    ("discrete_laplace", (1e30, 3), ValueError, "too large for the fixed-work geometric"),
    ("polya", (1.0, 1.0, 3), ValueError, r"alpha must be in \[0, 1\)"),
    ("polya", (0.0, 0.5, 3), ValueError, "r must be > 0"),
    ("integers", (0, 3), ValueError, "high must be an integer >= 1"),
    ("integers", (2**63, 3), ValueError, "high must be below 2\\^63"),
    ("bernoulli", (1.5, 3), ValueError, r"p must be in \[0, 1\]"),
    ("uniform", (-2,), ValueError, "size must be a non-negative integer"),
])
def test_deployment_rejects_bad_parameters(noise, method, args, exc, match):
    with pytest.raises(exc, match=match):
        getattr(noise, method)(*args)


def test_polya_table_size_is_capped(monkeypatch):
    # Pólya(1, 0.999) needs about 44,000 entries for a 2^-64 tail; the sampler then
    # switches construction (test_polya_with_alpha_near_one_uses_fixed_work_constructions).
    monkeypatch.setattr(samplers, "MAX_TABLE_SIZE", 1000)
    samplers.polya_table.cache_clear()
    with pytest.raises(ValueError, match="table would exceed 1000 entries"):
        samplers.polya_table(1.0, 0.999)


def test_deployment_needs_no_opendp():
    # Block the import of OpenDP and draw from every method.
    code = ("import sys; sys.modules['opendp'] = None\n"
            "from fedustat.privacy.noise import DeploymentNoise\n"
            "d = DeploymentNoise()\n"
            "print(d.laplace(1.0, 2).shape, d.polya(0.5, 0.5, 2).shape, d.bernoulli(0.5, 2).shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "(2,) (2,) (2,)"


# ------------------------------------------------------------ value-independent work
class WordCounter:
    """Replaces the CSPRNG entry point, counting requests; words from a fixed pattern.

    ``"low"``/``"high"``: all words 0 / 2^64 - 1; ``"split"``: the first half 0 and the
    second half 2^64 - 1 (the two geometrics of a discrete Laplace at opposite extremes);
    ``"real"``: the CSPRNG.
    """

    def __init__(self, pattern: str) -> None:
        self.pattern, self.words, self.calls = pattern, 0, 0
        self._real = samplers.random_words

    def __call__(self, count: int) -> np.ndarray:
        self.calls += 1
        self.words += count
        if self.pattern == "real":
            return self._real(count)
        words = np.full(count, 2**64 - 1, dtype=np.uint64)
        if self.pattern == "low":
            words[:] = 0
        elif self.pattern == "split":
            words[:count // 2] = 0
        return words


N_STRUCT = 5
SCALE_DIGITS = samplers.geometric_bits(2.0**39)  # Laplace(1.0) is 2^39 grid units
CASES = {
    "laplace": (lambda d: d.laplace(1.0, N_STRUCT), 2 * SCALE_DIGITS * N_STRUCT),
    "gaussian": (lambda d: d.gaussian(1.0, N_STRUCT), 2 * N_STRUCT),
    "discrete_laplace": (lambda d: d.discrete_laplace(4.0, N_STRUCT),
                         2 * samplers.geometric_bits(4.0) * N_STRUCT),
    "uniform": (lambda d: d.uniform(N_STRUCT), N_STRUCT),
    "integers": (lambda d: d.integers(10, N_STRUCT), 2 * N_STRUCT),
    "bernoulli": (lambda d: d.bernoulli(0.4, N_STRUCT), N_STRUCT),
    "bernoulli_certain": (lambda d: d.bernoulli(1.0, N_STRUCT), N_STRUCT),
    "polya": (lambda d: d.polya(0.2, 0.8, N_STRUCT), 2 * N_STRUCT),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_work_does_not_depend_on_the_value(monkeypatch, noise, name):
    draw, expected_words = CASES[name]
    outputs, requests = [], []
    for pattern in ("low", "high", "split", "real"):
        counter = WordCounter(pattern)
        monkeypatch.setattr(samplers, "random_words", counter)
        outputs.append(np.asarray(draw(noise)))
        requests.append((counter.calls, counter.words))
    # The same CSPRNG request whatever the words, hence whatever the value drawn ...
    assert len(set(requests)) == 1, requests
    assert requests[0] == (1, expected_words)
    # ... all randomness goes through the counted entry point (constant words are
    # reproducible) and the constant words do reach the extremes of the output.
    monkeypatch.setattr(samplers, "random_words", WordCounter("split"))
    np.testing.assert_array_equal(np.asarray(draw(noise)), outputs[2])
    if name != "bernoulli_certain":
        assert len({tuple(np.ravel(out).tolist()) for out in outputs[:3]}) >= 2


def test_table_sampler_compares_every_entry(monkeypatch):
    # Each draw compares its words with the whole table: counted through the comparison.
    table = samplers.polya_table(0.5, 0.9)
    seen: list[tuple[int, ...]] = []

    class Spy(np.ndarray):
        def __lt__(self, other):  # type: ignore[override]
            seen.append(np.broadcast_shapes(self.shape, np.shape(other)))
            return np.asarray(self).__lt__(other)

    spy = samplers.InversionTable(table.offset, table.high.view(Spy), table.low,
                                  table.tail_mass)
    for word in (0, 2**64 - 1):
        monkeypatch.setattr(samplers, "random_words",
                            lambda c, w=word: np.full(c, w, dtype=np.uint64))
        spy.sample(3)
    assert seen == [(3, table.high.size)] * 2


def test_table_inversion_is_exact_at_every_128_bit_threshold(monkeypatch):
    # u = threshold_i gives value offset + i + 1, u = threshold_i - 1 gives offset + i:
    # the word-by-word comparison is the 128-bit one, borrows between words included.
    table = samplers.polya_table(2.0, 0.6)
    thresholds = table.thresholds()
    assert thresholds == sorted(set(thresholds))  # strictly increasing: no empty value
    us = [u for t in thresholds for u in (t - 1, t)]
    words = np.array([[u >> 64, u & (2**64 - 1)] for u in us], dtype=np.uint64)
    monkeypatch.setattr(samplers, "random_words", lambda c: words.reshape(-1)[:c].copy())
    expected = [table.offset + i + step for i in range(len(thresholds)) for step in (0, 1)]
    assert table.sample(len(us)).tolist() == expected


# --- Pólya with alpha near 1: no table fits, fixed work all the same -------------------

@pytest.mark.parametrize(("r", "alpha"), [(0.5, 0.9), (0.2, 0.999), (1.5, 0.95)])
def test_compound_polya_law(r, alpha):
    # The compound Poisson-logarithmic construction, forced here on parameters where the
    # exact table exists too, against SciPy's negative binomial.
    draws = samplers._compound_polya(r, alpha, 50_000)
    law = stats.nbinom(r, 1 - alpha)
    edges = np.unique(law.ppf(np.linspace(0.0, 1.0, 21)[1:-1]).astype(int))
    counts = np.histogram(draws, bins=[-0.5, *(edges + 0.5), np.inf])[0].astype(float)
    cdf = np.concatenate([[0.0], law.cdf(edges), [1.0]])
    stat, crit = chi_square_ok(counts, np.diff(cdf))
    assert stat < crit


def test_polya_with_alpha_near_one_uses_fixed_work_constructions(noise):
    # U-MPC's noise at a fine fixed-point resolution: no table of 2^20 entries reaches a
    # 2^-64 tail, so r = 1 is a geometric by digits and r = 1/100 is compound.
    alpha = math.exp(-2.0**-20)
    assert not samplers._table_fits(1.0, alpha)
    geometric = noise.polya(1.0, alpha, 20_000)
    assert abs(geometric.mean() - alpha / (1 - alpha)) < 5 * math.sqrt(alpha) / (1 - alpha) \
        / math.sqrt(20_000)
    shares = noise.polya(0.01, alpha, 20_000)
    law = stats.nbinom(0.01, 1 - alpha)
    assert abs((shares == 0).mean() - law.pmf(0)) < 5 * math.sqrt(law.pmf(0) * law.sf(0)
                                                                   / 20_000)


@pytest.mark.parametrize(("r", "alpha"), [(0.01, math.exp(-2.0**-20)), (1.0, 1 - 1e-9)])
def test_large_polya_work_does_not_depend_on_the_value(monkeypatch, noise, r, alpha):
    outputs, requests = [], []
    for pattern in ("low", "high", "split", "real"):
        counter = WordCounter(pattern)
        monkeypatch.setattr(samplers, "random_words", counter)
        outputs.append(tuple(noise.polya(r, alpha, N_STRUCT).tolist()))
        requests.append((counter.calls, counter.words))
    assert len(set(requests)) == 1, requests
    assert len(set(outputs[:3])) >= 2


def test_geometric_thresholds_equal_one_exponential_per_digit():
    # The thresholds come from q^(2^j) by repeated squaring; each must equal
    # floor(2^64 / (1 + exp(2^j / scale))) computed directly at 50 digits.
    from decimal import Decimal, localcontext

    rng = np.random.default_rng(5)
    scales = [0.3, 1.0, 7.5, 1234.5, 2.0**39, 2.0**40 - 1.0,
              *np.exp(rng.uniform(math.log(2.0**39), math.log(2.0**40), 60))]
    for scale in scales:
        got = samplers.geometric_thresholds(float(scale))
        with localcontext() as ctx:
            ctx.prec = 50
            direct = [min(int(1 / (1 + (Decimal(1 << j) / Decimal(float(scale))).exp())
                              * (1 << 64)), (1 << 64) - 1) for j in range(got.size)]
        assert got.tolist() == direct, scale
