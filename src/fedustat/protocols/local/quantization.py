"""Quantization for the generic LDP protocol: public grids, quantizers, quantized kernels.

Sources
-------
* 000 (Bell et al., AISTATS 2020) Sec. 3 and Alg. 1 line 2: each party maps its input to
  one of k bins before randomizing it; inputs that already take few values (ratings,
  categories) are used as they are ("Algorithm 1 without quantization", 000 Sec. 6).
* 001 (arXiv version) App. A.2: bins with centres (2l - 1) / 2k on the declared range
  (Lemma 2), the midpoint kernel A^Mid (eq. 14), the average kernel A^Avg (eq. 15) and the
  quantization error Delta of eq. 13 (Remark 4).
* 000 Remark 2: randomized rounding to one of the two nearest bin centres.

A record is quantized on a **product grid**: every private column is either continuous
(declared bounds, cut into equal bins) or discrete (a declared list of values, each value
its own cell). A record's cell is the mixed-radix combination of its columns' cells, so
Kendall's tau on (y, z) pairs lives on k_y x k_z cells and 6 x 6 ratings on 36 cells.
Columns whose values are public (the labels of AUC, 000 Sec. 4) are not quantized or
randomized; they split the parties into public groups, and the quantized kernel has one
k x k block per pair of groups.

Every grid is built from declared, public parameters only (bounds, value lists, the
number of bins): never from the data, whose range or distinct values would leak.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np

from fedustat._validation import (
    RecordCheck,
    RecordCheckError,
    as_float_array,
    check_bounds,
    check_bounds_pair,
    check_positive_int,
)
from fedustat.privacy.noise import NoiseSource
from fedustat.stats import kernels as _kernels
from fedustat.stats.kernels import LABELS_PUBLIC, Kernel, PublicData

__all__ = [
    "ColumnGrid",
    "ProductGrid",
    "QuantizationPlan",
    "QuantizedKernel",
    "auc_bins",
    "corollary1_k",
    "plan_for_kernel",
    "quantize_kernel",
]

QuantizerName = Literal["round", "randomized"]
KernelMethod = Literal["mid", "avg", "center"]
QUANTIZERS = ("round", "randomized")
KERNEL_METHODS = ("mid", "avg", "center")

#: Default budget of kernel evaluations for numerically quantized user kernels.
DEFAULT_MAX_EVALUATIONS = 20_000_000
#: Default accuracy asked of the numerical average kernel (001 eq. 15), in kernel units.
DEFAULT_AVG_TOL = 1e-3
# Pairs of cells evaluated per block when a quantized kernel is computed numerically.
_PAIR_BLOCK = 2_000_000


# --------------------------------------------------------------------------------------
# One column
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ColumnGrid:
    """The cells of one column: equal bins of a declared range, or declared values.

    Use :meth:`continuous` or :meth:`discrete` to build one. Codes are ``0 .. size-1``:
    bin ``l`` covers ``[lo + l w, lo + (l+1) w)`` (the last bin includes ``hi``) with
    centre ``lo + (l + 1/2) w``, i.e. the centres ``(2l - 1) / 2k`` of 001 Lemma 2 for
    ``l = 1..k`` on [0, 1]; a discrete column's code is the value's position in the
    sorted declared values.
    """

    name: str
    lo: float
    hi: float
    bins: int
    values: np.ndarray | None

    @classmethod
    def continuous(cls, name: str, bounds: Any, bins: int) -> ColumnGrid:
        lo, hi = _bounds_pair(bounds, f"bounds for column {name!r}")
        bins = check_positive_int(bins, f"k for column {name!r}", minimum=2)
        return cls(name, lo, hi, bins, None)

    @classmethod
    def discrete(cls, name: str, values: Any) -> ColumnGrid:
        vals = as_float_array(values, f"domain for column {name!r}")
        uniq = np.unique(vals)
        if uniq.size != vals.size:
            raise ValueError(f"domain for column {name!r} lists a value more than once")
        uniq.setflags(write=False)
        return cls(name, float(uniq[0]), float(uniq[-1]), int(uniq.size), uniq)

    @property
    def is_discrete(self) -> bool:
        return self.values is not None

    @property
    def size(self) -> int:
        return self.bins

    @property
    def width(self) -> float:
        """Bin width ``(hi - lo) / k`` (0 for a discrete column: its cells are points)."""
        return 0.0 if self.is_discrete else (self.hi - self.lo) / self.bins

    def representatives(self) -> np.ndarray:
        """Bin centres, or the declared values."""
        if self.values is not None:
            return self.values.copy()
        return self.lo + (np.arange(self.bins) + 0.5) * self.width

    def cell_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper end of every cell (equal for the point cells of discrete values)."""
        if self.values is not None:
            return self.values.copy(), self.values.copy()
        edges = self.lo + np.arange(self.bins + 1) * self.width
        edges[-1] = self.hi
        return edges[:-1], edges[1:]

    def encode(self, x: np.ndarray, *, randomized: bool = False,
               noise: NoiseSource | None = None) -> np.ndarray:
        """Codes of the values ``x`` (int64); refuses values outside the declared domain.

        ``randomized=True`` rounds to one of the two nearest centres with probabilities
        that make the expected centre equal to ``x`` (000 Remark 2); values below the
        first or above the last centre go to that centre.
        """
        if self.values is not None:
            return self._encode_discrete(x)
        with RecordCheck(f"values outside the declared bounds of column {self.name!r}"):
            check_bounds(x, (self.lo, self.hi), self.name)
        t = (x - self.lo) / self.width
        if not randomized:
            # Nearest centre = the bin containing x; astype truncates, = floor for t >= 0.
            return np.minimum(t.astype(np.int64), self.bins - 1)
        if noise is None:
            raise ValueError("randomized rounding needs a noise source (the party's coins)")
        t = np.clip(t - 0.5, 0.0, self.bins - 1.0)
        low = np.minimum(t.astype(np.int64), self.bins - 2)
        up = noise.uniform(t.shape) < (t - low)
        return low + up

    def _encode_discrete(self, x: np.ndarray) -> np.ndarray:
        assert self.values is not None
        idx = np.searchsorted(self.values, x)
        idx = np.minimum(idx, self.bins - 1)
        bad = self.values[idx] != x
        if np.any(bad):
            unknown = np.unique(x[bad])
            shown = ", ".join(f"{v:g}" for v in unknown[:5])
            more = "" if unknown.size <= 5 else f" and {unknown.size - 5} more"
            raise RecordCheckError(
                f"values outside the declared domain of column {self.name!r}",
                f"{self.name} has values that are not in the declared domain: {shown}{more}; "
                f"declare every possible value in domain= (the map from values to codes "
                f"must be public, so it cannot be read from the data)")
        return idx.astype(np.int64, copy=False)

    def code_probabilities(self, x: float, *, randomized: bool = False) -> np.ndarray:
        """Exact distribution of the code of one value ``x`` (one-hot, or two-point)."""
        probs = np.zeros(self.bins)
        if self.values is not None or not randomized:
            probs[int(self.encode(np.array([x]))[0])] = 1.0
            return probs
        check_bounds(np.array([x]), (self.lo, self.hi), self.name)
        t = min(max((x - self.lo) / self.width - 0.5, 0.0), self.bins - 1.0)
        low = min(int(t), self.bins - 2)
        frac = t - low
        probs[low] += 1.0 - frac
        probs[low + 1] += frac
        return probs


def _bounds_pair(bounds: Any, what: str) -> tuple[float, float]:
    return check_bounds_pair(bounds, what)


# --------------------------------------------------------------------------------------
# A record: the product grid
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ProductGrid:
    """Cells of whole records: the product of the private columns' cells, plus public groups.

    ``size`` (the k of k-ary randomized response) is the product of the private columns'
    sizes; a record's code is ``sum_c code_c * stride_c`` with the first private column
    most significant. Public columns (discrete, declared values) are not quantized: the
    mixed-radix combination of their codes is the record's public *group*.
    """

    columns: tuple[str, ...]
    private: tuple[ColumnGrid, ...]
    private_index: tuple[int, ...]
    public: tuple[ColumnGrid, ...]
    public_index: tuple[int, ...]
    quantizer: QuantizerName = "round"

    def __post_init__(self) -> None:
        if self.quantizer not in QUANTIZERS:
            raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {self.quantizer!r}")
        if self.size < 2:
            raise ValueError(f"the grid has {self.size} cell; k-ary randomized response needs "
                             "at least 2 (declare more values or more bins)")

    @property
    def size(self) -> int:
        return math.prod(c.size for c in self.private)

    @property
    def n_groups(self) -> int:
        return math.prod(c.size for c in self.public) if self.public else 1

    @property
    def has_public(self) -> bool:
        return bool(self.public)

    @property
    def is_discrete(self) -> bool:
        """True when every private column is discrete (the kernel matrix is then exact)."""
        return all(c.is_discrete for c in self.private)

    @property
    def bins(self) -> dict[str, int]:
        """Cells per private column."""
        return {c.name: c.size for c in self.private}

    @property
    def continuous_bins(self) -> dict[str, int]:
        """Bins per continuous private column (what k or Corollary 1 fixes)."""
        return {c.name: c.size for c in self.private if not c.is_discrete}

    def _strides(self, grids: Sequence[ColumnGrid]) -> list[int]:
        strides, acc = [], 1
        for col in reversed(grids):
            strides.append(acc)
            acc *= col.size
        return strides[::-1]

    def encode(self, records: np.ndarray, noise: NoiseSource | None = None) -> np.ndarray:
        """Cell code of every record (rows of ``records`` hold all kernel columns)."""
        randomized = self.quantizer == "randomized"
        codes: np.ndarray | None = None
        for col, idx, stride in zip(self.private, self.private_index,
                                    self._strides(self.private), strict=True):
            part = col.encode(records[:, idx], randomized=randomized, noise=noise)
            part = part * stride if stride != 1 else part
            codes = part if codes is None else codes + part
        assert codes is not None
        return codes

    def groups(self, records: np.ndarray) -> np.ndarray:
        """Public group of every record (all zeros without public columns)."""
        if not self.public:
            return np.zeros(records.shape[0], dtype=np.int64)
        out = np.zeros(records.shape[0], dtype=np.int64)
        for col, idx, stride in zip(self.public, self.public_index,
                                    self._strides(self.public), strict=True):
            out += col.encode(records[:, idx]) * stride
        return out

    def code_probabilities(self, record: Any) -> np.ndarray:
        """Exact distribution of one record's cell code (for exact privacy checks)."""
        row = np.asarray(record, dtype=np.float64).reshape(-1)
        if row.size != len(self.columns):
            raise ValueError(f"record must have {len(self.columns)} values {self.columns}, "
                             f"got {row.size}")
        probs = np.ones(1)
        for col, idx in zip(self.private, self.private_index, strict=True):
            probs = np.kron(probs, col.code_probabilities(
                float(row[idx]), randomized=self.quantizer == "randomized"))
        return probs

    def _unravel(self, grids: Sequence[ColumnGrid], count: int) -> list[np.ndarray]:
        codes = np.arange(count)
        out = []
        for col, stride in zip(grids, self._strides(grids), strict=True):
            out.append((codes // stride) % col.size)
        return out

    def cell_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(k, n_private) arrays: lower and upper end of every cell in every private column."""
        lows, highs = [], []
        for col, part in zip(self.private, self._unravel(self.private, self.size), strict=True):
            lo, hi = col.cell_bounds()
            lows.append(lo[part])
            highs.append(hi[part])
        return np.column_stack(lows), np.column_stack(highs)

    def representatives(self) -> np.ndarray:
        """(k, n_private) array: the centre (or value) of every cell in every private column."""
        reps = []
        for col, part in zip(self.private, self._unravel(self.private, self.size), strict=True):
            reps.append(col.representatives()[part])
        return np.column_stack(reps)

    def group_values(self) -> np.ndarray:
        """(n_groups, n_public) array: the public values of every group."""
        if not self.public:
            return np.zeros((1, 0))
        vals = []
        for col, part in zip(self.public, self._unravel(self.public, self.n_groups), strict=True):
            assert col.values is not None
            vals.append(col.values[part])
        return np.column_stack(vals)

    def full_records(self, private_rows: np.ndarray, group: int) -> np.ndarray:
        """Kernel records from private-column values and one public group's values."""
        out = np.empty((private_rows.shape[0], len(self.columns)))
        out[:, list(self.private_index)] = private_rows
        if self.public:
            out[:, list(self.public_index)] = self.group_values()[group]
        return out

    def public_data(self, group_counts: np.ndarray) -> PublicData:
        """n and the public columns, each group's public values repeated by its count: all
        a kernel's map from U to its statistic may read (:class:`PublicData`)."""
        counts = np.asarray(group_counts, dtype=np.int64)
        columns = {}
        if self.public:
            values = self.group_values()[np.repeat(np.arange(self.n_groups), counts)]
            for j, col in enumerate(self.public):
                columns[col.name] = values[:, j]
        return PublicData(int(counts.sum()), columns)


# --------------------------------------------------------------------------------------
# The plan: what is declared before the number of bins is known
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _ColumnSpec:
    name: str
    index: int
    bounds: tuple[float, float] | None
    values: np.ndarray | None
    bins: int | None


@dataclass(frozen=True, eq=False)
class QuantizationPlan:
    """Declared quantization of a kernel's records, possibly still missing the bin counts.

    Built by :func:`plan_for_kernel`. :meth:`grid` turns it into a :class:`ProductGrid`
    once every continuous column has a number of bins (given, or from Corollary 1 and
    the number of parties through :meth:`bins_for`).
    """

    kernel: Kernel
    private: tuple[_ColumnSpec, ...]
    public: tuple[_ColumnSpec, ...]
    quantizer: QuantizerName

    @property
    def continuous(self) -> tuple[_ColumnSpec, ...]:
        return tuple(c for c in self.private if c.values is None)

    @property
    def resolved(self) -> bool:
        """True when every continuous column has its number of bins."""
        return all(c.bins is not None for c in self.continuous)

    @property
    def discrete_size(self) -> int:
        return math.prod(c.values.size for c in self.private if c.values is not None)

    def bins_for(self, n_parties: int, epsilon: float,
                 lipschitz: float | None = None) -> dict[str, int]:
        """Bins per continuous column from Corollary 1 (000): k = n^{1/4} sqrt(L eps).

        The corollary's k is the size of the randomized-response domain, so it is divided
        by the number of discrete cells and split evenly over the continuous columns
        (at least 2 bins each). ``lipschitz`` defaults to :meth:`unit_lipschitz`, or 1
        when the kernel declares none (the density-Lipschitz case of Theorem 2 with
        L_mu = 1 on the unit-rescaled domain).
        """
        out = {c.name: int(c.bins) for c in self.continuous if c.bins is not None}
        missing = [c for c in self.continuous if c.bins is None]
        if not missing:
            return out
        if lipschitz is None and self.auc_rule_applies:
            out[missing[0].name] = auc_bins(n_parties, epsilon)
            return out
        lip = self.unit_lipschitz() if lipschitz is None else float(lipschitz)
        total = corollary1_k(n_parties, epsilon, 1.0 if lip is None else lip)
        per_column = (total / self.discrete_size) ** (1.0 / len(self.continuous))
        for col in missing:
            out[col.name] = max(2, round(per_column))
        return out

    @property
    def auc_rule_applies(self) -> bool:
        """True for the AUC kernel on one continuous score column with public labels: its
        default number of bins is :func:`auc_bins`, not Corollary 1."""
        return (self.kernel.func is _kernels._auc_func and len(self.private) == 1
                and self.private[0].values is None and len(self.public) == 1)

    def unit_lipschitz(self) -> float | None:
        """The kernel's Lipschitz constant on the unit-rescaled domain and unit output.

        Theorem 2 assumes X = [0, 1] and f in [0, 1]; rescaling the declared range
        [lo, hi] to [0, 1] and f by its output width turns L_f into
        ``L_f (hi - lo) / (f_hi - f_lo)``. Defined for one continuous private column.
        """
        if self.kernel.lipschitz is None or len(self.private) != 1 or self.private[0].bounds \
                is None:
            return None
        lo, hi = self.private[0].bounds
        return float(self.kernel.lipschitz) * (hi - lo) / self.kernel.sensitivity

    def grid(self, bins: Mapping[str, int] | None = None) -> ProductGrid:
        """The product grid, with ``bins`` filling (or overriding) continuous columns."""
        bins = dict(bins or {})
        private = []
        for spec in self.private:
            if spec.values is not None:
                private.append(ColumnGrid.discrete(spec.name, spec.values))
                continue
            count = bins.get(spec.name, spec.bins)
            if count is None:
                raise ValueError(f"column {spec.name!r} has no number of bins; pass k= or "
                                 "let the protocol derive it from the number of parties")
            private.append(ColumnGrid.continuous(spec.name, spec.bounds, int(count)))
        public = [ColumnGrid.discrete(spec.name, spec.values) for spec in self.public]
        return ProductGrid(self.kernel.columns, tuple(private),
                           tuple(s.index for s in self.private), tuple(public),
                           tuple(s.index for s in self.public), self.quantizer)


def corollary1_k(n_parties: int, epsilon: float, lipschitz: float = 1.0) -> int:
    """Number of bins from Corollary 1 of 000: ``k = n^{1/4} sqrt(L eps)``, at least 2.

    It balances the randomized-response variance ~ k^2 / (n eps^2) of Theorem 1 against
    the quantization error ~ L^2 / k^2 of Theorem 2 (stated for eps <= 1).
    """
    n = check_positive_int(n_parties, "n_parties")
    eps = float(epsilon)
    lip = float(lipschitz)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    if not (math.isfinite(lip) and lip > 0):
        raise ValueError(f"lipschitz must be finite and > 0, got {lipschitz!r}")
    return max(2, round(n ** 0.25 * math.sqrt(lip * eps)))


#: A of :func:`auc_bins`: the quantization gap at most a tenth of the noise's standard
#: deviation when G / sigma_0 <= 4 (docs/protocols/ldp-quantized.md, "Number of bins").
AUC_BINS_FACTOR = 40.0


def auc_bins(n_parties: int, epsilon: float) -> int:
    """Default bins for the AUC of continuous scores: the smallest k >= 2 with
    ``k^2 (k + e^eps - 1) >= A sqrt(n) (e^eps - 1)``, and at least Corollary 1's k.

    The AUC kernel is a step (not Lipschitz), so 000 Thm 2 does not bound its quantization
    error, and Corollary 1's MSE-optimal k leaves a gap comparable to the noise (a biased
    interval). For scores with densities f+ and f- smooth within bins of width w, the
    gap between the AUC of the quantized scores (ties within a bin counted 1/2) and the
    exact AUC is ``-(w^2 / 12) * int (f+' f- - f+ f-') dx + O(w^3)`` (a first-order
    expansion of the densities within each bin; derived in
    docs/protocols/ldp-quantized.md), i.e. ``G / k^2`` on the declared range. The noise's
    standard deviation is ``(k + e^eps - 1) / (e^eps - 1) * sigma_0 / sqrt(n)`` (000 Alg. 1:
    the debiasing divides by ``1 - beta = (e^eps - 1) / (k + e^eps - 1)``). The rule makes
    ``G / k^2 <= sd / 10`` for ``G / sigma_0 <= A / 10``: the gap is then negligible
    against the noise (bias below a tenth of a standard error). Only public n and epsilon
    enter: k stays public and is fixed before any report.
    """
    n = check_positive_int(n_parties, "n_parties")
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    gain = math.expm1(min(eps, 700.0))
    need = AUC_BINS_FACTOR * math.sqrt(n)
    # k^2 (k + gain) >= need * gain, divided by gain (finite for any epsilon). Below both
    # (need gain / 2)^(1/3) and sqrt(need / 2) each term is under need / 2: a start.
    k = max(2, int(min(math.exp((math.log(need * 0.5) + math.log(gain)) / 3.0),
                       math.sqrt(need * 0.5))))
    while k * k * (k / gain + 1.0) < need:
        k += 1
    return max(k, corollary1_k(n, eps))


def _kernel_bounds(kernel: Kernel) -> tuple[float, float] | None:
    """Bounds a built-in bounded kernel (Gini, variance) was created with."""
    validate = kernel.validate
    if isinstance(validate, partial) and "bounds" in validate.keywords:
        lo, hi = validate.keywords["bounds"]
        return float(lo), float(hi)
    return None


def _per_column(value: Any, columns: Sequence[str], private: Sequence[str], what: str, *,
                is_single: Any) -> dict[str, Any]:
    """Normalize a per-column parameter: a mapping by column name, a sequence with one
    entry per column (None where it does not apply), or, when the kernel has a single
    private column, the value for that column itself."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        unknown = set(value) - set(columns)
        if unknown:
            raise ValueError(f"{what} names unknown columns {sorted(unknown)}; the kernel's "
                             f"columns are {list(columns)}")
        return {k: v for k, v in value.items() if v is not None}
    if is_single(value):
        if len(private) != 1:
            raise ValueError(f"{what} must be given per column for a kernel with private "
                             f"columns {list(private)}: a mapping {{name: ...}} or one entry "
                             "per column (None where it does not apply)")
        return {private[0]: value}
    try:
        items = list(value)
    except TypeError as exc:
        raise TypeError(f"{what} must be a mapping, a sequence per column or a single "
                        f"value, got {value!r}") from exc
    if len(items) != len(columns):
        raise ValueError(f"{what} has {len(items)} entries but the kernel has "
                         f"{len(columns)} columns {list(columns)}")
    return {c: v for c, v in zip(columns, items, strict=True) if v is not None}


def _is_pair(value: Any) -> bool:
    if isinstance(value, str | bytes):
        return False
    try:
        items = list(value)
    except TypeError:
        return False
    return len(items) == 2 and all(np.ndim(v) == 0 and v is not None for v in items)


def _is_flat_values(value: Any) -> bool:
    arr = np.asarray(value, dtype=object)
    return arr.ndim == 1 and all(np.ndim(v) == 0 and v is not None for v in arr)


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


_INDICATOR_FUNCS = (_kernels._duplicate_func, _kernels._rand_func)


def plan_for_kernel(kernel: Kernel, *, k: Any = None, bounds: Any = None, domain: Any = None,
                    public_columns: Sequence[str] | None = None,
                    quantizer: str = "round") -> QuantizationPlan:
    """Declare how a kernel's records are quantized (000 Alg. 1 line 2).

    Parameters
    ----------
    kernel:
        A degree-2 kernel whose reported statistic uses public quantities only.
    k:
        Bins per continuous column: an int (every continuous column), a sequence per
        column or a mapping by column name; None leaves them to Corollary 1.
    bounds:
        Declared range of continuous columns: ``(lo, hi)`` for a kernel with one private
        column, else a mapping or a sequence per column. Gini and variance kernels
        carry their own bounds.
    domain:
        Declared values of discrete columns (categories, rating scales): a list of
        values for a one-column kernel, else a mapping or a sequence per column. A
        discrete column is used as it is, without quantization.
    public_columns:
        Columns whose values are public (not randomized). Defaults to the label column
        of kernels whose adjacency makes labels public (AUC, Mann-Whitney).
    quantizer:
        ``"round"`` (nearest bin centre) or ``"randomized"`` (000 Remark 2).
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedustat Kernel, got {type(kernel).__name__}")
    if kernel.degree != 2:
        raise ValueError(f"kernel {kernel.name!r} has degree {kernel.degree}; the generic LDP "
                         "protocol (000 Alg. 1) estimates degree-2 U-statistics")
    if not kernel.statistic_is_public:
        raise ValueError(f"kernel {kernel.name!r} maps U to its statistic with private data "
                         "(e.g. tau-b's tie counts), so the release would not be covered by "
                         "the local guarantee; use kendall_tau_kernel('a')")
    if quantizer not in QUANTIZERS:
        raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {quantizer!r}")
    columns = kernel.columns
    if public_columns is None:
        public = (tuple(c for c in columns[1:]) if kernel.adjacency == LABELS_PUBLIC else ())
    else:
        public = (public_columns,) if isinstance(public_columns, str) else tuple(public_columns)
        unknown = set(public) - set(columns)
        if unknown:
            raise ValueError(f"public_columns names unknown columns {sorted(unknown)}; the "
                             f"kernel's columns are {list(columns)}")
    if (kernel.adjacency == LABELS_PUBLIC and kernel.statistic_fn is not None
            and set(public) != set(columns[1:])):
        raise ValueError(f"kernel {kernel.name!r} turns U into its statistic with the class "
                         f"sizes, which are public only when the labels are: keep "
                         f"public_columns={tuple(columns[1:])!r}")
    private_names = [c for c in columns if c not in public]
    if not private_names:
        raise ValueError("every column is public; nothing is left to protect")

    bounds_map = _per_column(bounds, columns, private_names, "bounds", is_single=_is_pair)
    domain_map = _per_column(domain, columns, private_names, "domain",
                             is_single=_is_flat_values)
    if _is_int(k):
        # One number of bins for every continuous column.
        k_map = {c: k for c in private_names}
    else:
        k_map = _per_column(k, columns, private_names, "k", is_single=_is_int)
    kernel_bounds = _kernel_bounds(kernel)
    if kernel_bounds is not None and len(private_names) == 1:
        bounds_map.setdefault(private_names[0], kernel_bounds)
    if kernel.func is _kernels._auc_func and public:
        # auc_kernel normalizes labels to 0/1 before any protocol sees them.
        domain_map.setdefault(columns[1], (0.0, 1.0))

    private_specs, public_specs = [], []
    codes_from_k = False
    for index, name in enumerate(columns):
        has_domain, has_bounds = name in domain_map, name in bounds_map
        if name in public:
            if not has_domain:
                raise ValueError(f"public column {name!r} needs its declared values in "
                                 "domain= (the groups the aggregator forms)")
            grid = ColumnGrid.discrete(name, domain_map[name])
            public_specs.append(_ColumnSpec(name, index, None, grid.values, None))
            continue
        if has_domain and has_bounds and kernel_bounds is None:
            raise ValueError(f"column {name!r} has both bounds and a domain; declare "
                             "bounds=(lo, hi) for a continuous column or domain=[...] for a "
                             "discrete one")
        if has_domain:
            if name in k_map and not _is_int(k):
                raise ValueError(f"column {name!r} is discrete (domain given); it is used "
                                 "without quantization, so it takes no k")
            grid = ColumnGrid.discrete(name, domain_map[name])
            if kernel_bounds is not None:
                check_bounds(grid.values, kernel_bounds, f"domain for column {name!r}")
            private_specs.append(_ColumnSpec(name, index, None, grid.values, None))
        elif has_bounds:
            if kernel.func in _INDICATOR_FUNCS:
                raise ValueError(f"kernel {kernel.name!r} compares values for equality; its "
                                 f"column {name!r} needs a declared discrete domain=[...] "
                                 "of categories (codes 0..k-1 or the category values)")
            lo, hi = _bounds_pair(bounds_map[name], f"bounds for column {name!r}")
            count = k_map.get(name)
            if count is not None:
                count = check_positive_int(count, f"k for column {name!r}", minimum=2)
            private_specs.append(_ColumnSpec(name, index, (lo, hi), None, count))
        elif name in k_map and kernel.func in _INDICATOR_FUNCS:
            # Category codes 0..k-1, as k-ary randomized response takes them.
            count = check_positive_int(k_map[name], f"k for column {name!r}", minimum=2)
            values = np.arange(count, dtype=np.float64)
            private_specs.append(_ColumnSpec(name, index, None, values, None))
            codes_from_k = True
        else:
            raise ValueError(
                f"column {name!r} of kernel {kernel.name!r} needs declared bounds=(lo, hi) "
                "(continuous, quantized into k bins) or domain=[...] (discrete values used "
                "as they are); they must be public, not taken from the data")
    if k is not None and not codes_from_k and all(s.values is not None for s in private_specs):
        raise ValueError("k sets the number of bins of continuous columns, but every private "
                         "column is discrete (domain given); drop k")
    return QuantizationPlan(kernel, tuple(private_specs), tuple(public_specs),
                            quantizer)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Quantized kernels (001 App. A.2)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class QuantizedKernel:
    """The kernel on the grid: one k x k matrix per ordered pair of public groups.

    Attributes
    ----------
    matrices:
        ``(m, m, k, k)`` array; ``matrices[a, b, i, j]`` is the quantized kernel between a
        record in cell i of group a and one in cell j of group b. ``matrices[b, a]`` is
        ``matrices[a, b].T`` and every diagonal block is symmetric.
    spread:
        ``(sup - inf)^2 / 4`` of the kernel over each pair of cells (Delta_ij of 001
        App. A.2.1), or None where a code does not stand for one cell (randomized
        rounding).
    method:
        ``"mid"`` (eq. 14), ``"avg"`` (eq. 15) or ``"center"`` (f at the cell centres).
    exact:
        True when the matrices are exact (closed forms, or discrete cells); False for
        numerical grid search / quadrature.
    accuracy:
        For numerical ``"avg"``: the largest change between the quadrature with s and 2s
        nodes per dimension (an estimate of the error); for numerical ``"mid"`` with a
        Lipschitz kernel: the bound ``L x node spacing``; else None.
    nodes:
        Nodes per continuous dimension of the numerical rule, or None.
    """

    matrices: np.ndarray
    spread: np.ndarray | None
    method: str
    exact: bool
    accuracy: float | None = None
    nodes: int | None = None

    @property
    def error_factor(self) -> float:
        """|f - A| <= factor * sqrt(Delta_ij) per pair: 1 for the midpoint kernel, else 2."""
        return 1.0 if self.method == "mid" else 2.0


def _sign_terms(lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """sup, inf and average of sign(x - y) for x in cell a, y in cell b (one column).

    Distinct cells of a column are disjoint half-open bins (or distinct points), so the
    sign is constant on them; on one bin it takes every value in {-1, 0, 1} with mean 0.
    """
    same = (lo_a == lo_b) & (hi_a == hi_b)
    wide = same & (hi_a > lo_a)
    sign = np.sign((lo_a + hi_a) - (lo_b + hi_b))
    return np.where(wide, 1.0, sign), np.where(wide, -1.0, sign), np.where(same, 0.0, sign)


def _abs_diff_terms(lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """sup, inf, average of |x - y| (x uniform in cell a, y in cell b) and the mean gap."""
    sup = np.maximum(np.abs(hi_a - lo_b), np.abs(hi_b - lo_a))
    inf = np.maximum(0.0, np.maximum(lo_a - hi_b, lo_b - hi_a))
    width = hi_a - lo_a
    same = (lo_a == lo_b) & (hi_a == hi_b)
    mean_gap = 0.5 * ((lo_a + hi_a) - (lo_b + hi_b))
    # E|X - Y| for independent uniforms: |mean gap| on disjoint cells, w/3 on one cell.
    avg = np.where(same, width / 3.0, np.abs(mean_gap))
    return sup, inf, avg, mean_gap


def _closed_form(kernel: Kernel, grid: ProductGrid, lo: np.ndarray, hi: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """sup, inf, avg as (m, m, k, k) arrays for the built-in kernels, or None."""
    func, m, k = kernel.func, grid.n_groups, grid.size
    la, ha = lo[:, None, :], hi[:, None, :]
    lb, hb = lo[None, :, :], hi[None, :, :]

    def tile(a: np.ndarray) -> np.ndarray:
        return np.broadcast_to(a, (m, m, k, k)).copy()

    if func is _kernels._gini_func:
        sup, inf, avg, _ = _abs_diff_terms(la[..., 0], ha[..., 0], lb[..., 0], hb[..., 0])
        return tile(sup), tile(inf), tile(avg)
    if func is _kernels._variance_func:
        sup, inf, _, gap = _abs_diff_terms(la[..., 0], ha[..., 0], lb[..., 0], hb[..., 0])
        var_a = (ha[..., 0] - la[..., 0]) ** 2 / 12.0
        var_b = (hb[..., 0] - lb[..., 0]) ** 2 / 12.0
        # E (X - Y)^2 / 2 = ((E X - E Y)^2 + Var X + Var Y) / 2.
        return tile(0.5 * sup**2), tile(0.5 * inf**2), tile(0.5 * (gap**2 + var_a + var_b))
    if func is _kernels._kendall_func and not grid.has_public:
        sy, iy, ay = _sign_terms(la[..., 0], ha[..., 0], lb[..., 0], hb[..., 0])
        sz, iz, az = _sign_terms(la[..., 1], ha[..., 1], lb[..., 1], hb[..., 1])
        corners = np.stack([sy * sz, sy * iz, iy * sz, iy * iz])
        # Coordinates vary independently over a box, so the product's extremes are at the
        # extremes of the factors and its average is the product of the averages.
        return tile(corners.max(axis=0)), tile(corners.min(axis=0)), tile(ay * az)
    if func is _kernels._auc_func and grid.public_index == (1,) and grid.private_index == (0,):
        s_sup, s_inf, s_avg = _sign_terms(la[..., 0], ha[..., 0], lb[..., 0], hb[..., 0])
        labels = grid.group_values()[:, 0]
        sup, inf, avg = (np.zeros((m, m, k, k)) for _ in range(3))
        for a in range(m):
            for b in range(m):
                if labels[a] == labels[b]:
                    continue
                # f = (1 + sign(s_pos - s_neg)) / 2; with the positive second, the sign flips.
                if labels[a] > labels[b]:
                    sup[a, b], inf[a, b] = (1 + s_sup) / 2, (1 + s_inf) / 2
                    avg[a, b] = (1 + s_avg) / 2
                else:
                    sup[a, b], inf[a, b] = (1 - s_inf) / 2, (1 - s_sup) / 2
                    avg[a, b] = (1 - s_avg) / 2
        return sup, inf, avg
    return None


def _evaluate_pairs(kernel: Kernel, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Kernel values on all (left row, right row) pairs as a (len(left), len(right)) array."""
    out = np.empty((left.shape[0], right.shape[0]))
    rows_per_block = max(1, _PAIR_BLOCK // max(1, right.shape[0]))
    lo, hi = kernel.output_range
    slack = 1e-12 * max(1.0, abs(lo), abs(hi))
    for start in range(0, left.shape[0], rows_per_block):
        block = left[start:start + rows_per_block]
        a = np.repeat(block, right.shape[0], axis=0)
        b = np.tile(right, (block.shape[0], 1))
        values = np.asarray(kernel.func(a, b), dtype=np.float64)
        if values.shape != (a.shape[0],):
            raise ValueError(f"kernel {kernel.name!r} returned shape {values.shape} for "
                             f"{a.shape[0]} pairs; func must return one value per pair")
        if not (np.all(np.isfinite(values)) and values.min() >= lo - slack
                and values.max() <= hi + slack):
            raise ValueError(f"kernel {kernel.name!r} returned values outside its declared "
                             f"output_range [{lo}, {hi}] on the quantization grid")
        out[start:start + block.shape[0]] = values.reshape(block.shape[0], right.shape[0])
    return out


def _cell_points(grid: ProductGrid, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray
                 ) -> np.ndarray:
    """(k, p, n_private) points of every cell: ``nodes`` (fractions in [0, 1]) in each
    continuous column, the value itself in each discrete column."""
    per_col = []
    for c, col in enumerate(grid.private):
        if col.is_discrete:
            per_col.append(lo[:, c:c + 1])
        else:
            per_col.append(lo[:, c:c + 1] + (hi[:, c:c + 1] - lo[:, c:c + 1]) * nodes[None, :])
    k = grid.size
    mesh = np.stack(np.meshgrid(*[np.arange(p.shape[1]) for p in per_col], indexing="ij"),
                    axis=-1).reshape(-1, len(per_col))
    pts = np.empty((k, mesh.shape[0], len(per_col)))
    for c, p in enumerate(per_col):
        pts[:, :, c] = p[:, mesh[:, c]]
    return pts


def _numeric_terms(kernel: Kernel, grid: ProductGrid, pts: np.ndarray,
                   reduce: str) -> np.ndarray:
    """sup / inf / mean of f over the point sets of every pair of cells and groups.

    Blocks of left cells keep memory bounded (a loop over cells, never over data).
    """
    m, k, p = grid.n_groups, grid.size, pts.shape[1]
    out = np.empty((m, m, k, k))
    cells_per_block = max(1, _PAIR_BLOCK // (p * k * p))
    for a in range(m):
        for b in range(m):
            right = grid.full_records(pts.reshape(k * p, -1), b)
            for start in range(0, k, cells_per_block):
                block = pts[start:start + cells_per_block]
                size = block.shape[0]
                left = grid.full_records(block.reshape(size * p, -1), a)
                vals = _evaluate_pairs(kernel, left, right).reshape(size, p, k, p)
                if reduce == "max":
                    out[a, b, start:start + size] = vals.max(axis=(1, 3))
                elif reduce == "min":
                    out[a, b, start:start + size] = vals.min(axis=(1, 3))
                else:
                    out[a, b, start:start + size] = vals.mean(axis=(1, 3))
    return out


def _exact_center(kernel: Kernel, grid: ProductGrid) -> np.ndarray:
    reps = grid.representatives()
    m = grid.n_groups
    out = np.empty((m, m, grid.size, grid.size))
    for a in range(m):
        for b in range(m):
            out[a, b] = _evaluate_pairs(kernel, grid.full_records(reps, a),
                                        grid.full_records(reps, b))
    return out


def _symmetrize(mats: np.ndarray) -> np.ndarray:
    """Enforce A^{ba} = (A^{ab})^T exactly (quadrature sums pairs in different orders)."""
    return 0.5 * (mats + mats.transpose(1, 0, 3, 2))


def quantize_kernel(kernel: Kernel, grid: ProductGrid, method: str = "mid", *,
                    max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
                    avg_tol: float = DEFAULT_AVG_TOL) -> QuantizedKernel:
    """The kernel on the grid's cells (001 App. A.2).

    * ``"mid"``: ``A_ij = (sup f + inf f) / 2`` over cell i x cell j (eq. 14), which
      minimizes the worst-case quantization error (eq. 13);
    * ``"avg"``: the average of f over the two cells (eq. 15, Lebesgue measure);
    * ``"center"``: f at the cell centres (the "representative values" of 002 App. A.3),
      the only choice that matches randomized rounding.

    Discrete cells give the exact kernel for every method. Gini, variance, Kendall and
    AUC have closed forms on bins. Other kernels are computed numerically within
    ``max_evaluations`` kernel calls: ``"mid"`` by grid search on evenly spaced nodes
    (exact when f attains its extremes on a cell pair at the nodes, e.g. f monotone in
    each coordinate; within L x spacing for an L-Lipschitz f), ``"avg"`` by the composite
    midpoint rule with s and 2s nodes per dimension, reporting their largest difference
    as the accuracy and warning if it exceeds ``avg_tol``.
    """
    if method not in KERNEL_METHODS:
        raise ValueError(f"quantized_kernel must be one of {KERNEL_METHODS}, got {method!r}")
    if grid.quantizer == "randomized" and method != "center" and not grid.is_discrete:
        raise ValueError("randomized rounding sends a value to one of the two nearest bin "
                         "centres, so a code does not stand for one bin; use "
                         "quantized_kernel='center' (f at the bin centres)")
    max_evaluations = check_positive_int(max_evaluations, "max_evaluations")
    m, k = grid.n_groups, grid.size
    lo, hi = grid.cell_bounds()
    with_spread = grid.quantizer == "round"

    if grid.is_discrete:
        exact = _exact_center(kernel, grid)
        zeros = np.zeros_like(exact) if with_spread else None
        return QuantizedKernel(_symmetrize(exact), zeros, method, True)

    closed = _closed_form(kernel, grid, lo, hi)
    if closed is not None:
        sup, inf, avg = closed
        if method == "mid":
            mats = 0.5 * (sup + inf)
        elif method == "avg":
            mats = avg
        else:
            mats = _exact_center(kernel, grid)
        spread = 0.25 * (sup - inf) ** 2 if with_spread else None
        return QuantizedKernel(_symmetrize(mats), spread, method, True)

    if method == "center" and not with_spread:
        return QuantizedKernel(_symmetrize(_exact_center(kernel, grid)), None, method, True)

    n_cont = sum(not c.is_discrete for c in grid.private)
    per_pair = max_evaluations / (m * m * k * k)

    def nodes_within(budget: float) -> int:
        # Points per cell p = s^n_cont; a pair of cells costs p^2 evaluations.
        return math.floor(budget ** (1.0 / (2 * n_cont)) + 1e-9)

    s_mid = min(nodes_within(per_pair), 33)
    accuracy: float | None = None
    nodes: int | None = None
    if method == "avg":
        s_avg = min(nodes_within(per_pair) // 2, 64)
        if s_avg < 1:
            raise ValueError(
                f"the average kernel needs at least 2 quadrature nodes per dimension on "
                f"{m * m * k * k} pairs of cells; raise max_evaluations (now {max_evaluations}) "
                "or use fewer bins")
        coarse = _numeric_terms(kernel, grid, _cell_points(
            grid, (np.arange(s_avg) + 0.5) / s_avg, lo, hi), "mean")
        fine = _numeric_terms(kernel, grid, _cell_points(
            grid, (np.arange(2 * s_avg) + 0.5) / (2 * s_avg), lo, hi), "mean")
        mats, nodes = fine, 2 * s_avg
        accuracy = float(np.max(np.abs(fine - coarse)))
        if accuracy > avg_tol:
            warnings.warn(
                f"the numerical average kernel (001 eq. 15) of {kernel.name!r} changed by up "
                f"to {accuracy:.3g} between {s_avg} and {2 * s_avg} nodes per dimension "
                f"(avg_tol={avg_tol:g}); raise max_evaluations or use quantized_kernel='mid'",
                stacklevel=2)
    if with_spread or method == "mid":
        if s_mid < 2:
            raise ValueError(
                f"the midpoint kernel needs at least 2 grid nodes per dimension on "
                f"{m * m * k * k} pairs of cells; raise max_evaluations (now {max_evaluations}) "
                "or use fewer bins")
        # Evenly spaced nodes over the half-open bin: the upper end is nudged inside.
        frac = np.linspace(0.0, 1.0, s_mid)
        frac[-1] = 1.0 - 1e-9
        pts = _cell_points(grid, frac, lo, hi)
        sup = _numeric_terms(kernel, grid, pts, "max")
        inf = _numeric_terms(kernel, grid, pts, "min")
        spread = 0.25 * (sup - inf) ** 2 if with_spread else None
        if method == "mid":
            mats, nodes = 0.5 * (sup + inf), s_mid
            if kernel.lipschitz is not None:
                spacing = max(c.width for c in grid.private) / (s_mid - 1)
                accuracy = float(kernel.lipschitz) * spacing * n_cont
    else:
        spread = None
    if method == "center":
        mats = _exact_center(kernel, grid)
    return QuantizedKernel(_symmetrize(mats), spread, method, method == "center", accuracy,
                           nodes)
