"""Kernels of U-statistics: degree, output range (hence sensitivity), evaluation, fast paths.

A kernel ``f`` of degree ``k`` maps k records to a number; its U-statistic is the average of
``f`` over all k-subsets of the records (000 eq. 2). Data for a kernel is always a 2-D float
array of shape ``(n, len(kernel.columns))``, one row per party / record; ``kernel.pack``
builds it from columns and checks them.

Each built-in documents how its U-statistic ``U`` relates to the statistic reported by
``kernel.statistic(U, public)``, where ``public`` (a :class:`PublicData`) holds only n and the
kernel's public columns, so mapping a private U to the statistic is post-processing:

==========================  =========  ===================================================
factory                     degree     reported statistic
==========================  =========  ===================================================
``auc_kernel``              2          AUC = U C(n,2) / (n+ n-)       (000 eq. 7)
``mann_whitney_kernel``     2          Mann-Whitney U = U C(n,2)
``kendall_tau_kernel("a")`` 2          tau-a = U                      (000 eq. 6)
``kendall_tau_kernel("b")`` 2          tau-b = U C(n,2) / sqrt((C(n,2)-T_x)(C(n,2)-T_y))
``gini_kernel``             2          Gini mean difference = U       (000 eq. 4)
``duplicate_pair_kernel``   2          duplicate-pair ratio = U       (000 eq. 5, inner)
``renyi2_entropy_kernel``   2          Rényi-2 entropy = -ln U        (000 eq. 5)
``rand_index_kernel``       2          Rand index = U
``variance_kernel``         2          sample variance (ddof=1) = U   (000 Remark 1)
``vus_kernel``              3          VUS = U C(n,3) / (n0 n1 n2)
``user_kernel``             any        U (or a user-supplied map)
==========================  =========  ===================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from fedustat._validation import (
    RecordCheck,
    RecordCheckError,
    as_binary_labels,
    as_float_array,
    check_bounds,
    check_bounds_pair,
    check_consistent_length,
    check_positive_int,
)
from fedustat.stats.exact import (
    auc_row_sums,
    auc_twice_numerator,
    check_ordinal_classes,
    check_ordinal_values,
    duplicate_pair_ratio_unchecked,
    duplicate_row_sums,
    gini_mean_difference_unchecked,
    gini_row_sums,
    kendall_counts,
    n_pairs,
    rand_index_unchecked,
    rand_row_sums,
    tie_pairs,
    variance_row_sums,
    vus_twelve_numerator,
)

__all__ = [
    "KERNEL_FACTORIES",
    "Kernel",
    "PublicData",
    "auc_kernel",
    "duplicate_pair_kernel",
    "gini_kernel",
    "kendall_tau_kernel",
    "kendall_tie_kernel",
    "mann_whitney_kernel",
    "rand_index_kernel",
    "renyi2_entropy_kernel",
    "user_kernel",
    "variance_kernel",
    "vus_kernel",
]

KernelFunc = Callable[..., np.ndarray]

# Labelled kernels follow the papers' setting: the class of each record (hence the class
# sizes used by ``statistic``) is public, the score is private (000 Sec. 4).
LABELS_PUBLIC = "replace one record's score; labels and class sizes public"


@dataclass(frozen=True, eq=False)
class PublicData:
    """What the map from U to the reported statistic may read: never a private value.

    ``n`` is the number of records (public under replace-one adjacency) and ``columns``
    the kernel's public columns only (the labels of a labelled kernel, public as in 000
    Sec. 4). Private protocols hand this, never the records, to ``statistic_fn`` and
    ``active_share``, so what they compute from a noised U stays post-processing.

    A server that knows only how many records carry each public value (a histogram, as
    in a distributed run) gives the columns in ``grouped`` form instead: row i of
    ``grouped`` stands for ``weights[i]`` records. :meth:`class_sizes` and
    :meth:`count_nonzero` read the weights (O(groups)); :meth:`column` expands them (n
    entries) only for a map that asks for a whole column.
    """

    n: int
    columns: Mapping[str, np.ndarray] = field(default_factory=dict)
    grouped: Mapping[str, np.ndarray] = field(default_factory=dict)
    weights: np.ndarray | None = None

    def column(self, name: str) -> np.ndarray:
        """The public column ``name``; a private column is refused."""
        if name in self.columns:
            return self.columns[name]
        if name in self.grouped and self.weights is not None:
            return np.repeat(self.grouped[name], self.weights)
        public = ", ".join([*self.columns, *self.grouped]) or "none"
        raise ValueError(f"column {name!r} is not public (public columns: {public}); a "
                         "release may not read private values")

    def class_sizes(self, name: str, n_classes: int) -> np.ndarray:
        """Number of records in each class 0..n_classes-1 of the public column ``name``."""
        if name not in self.columns and name in self.grouped and self.weights is not None:
            # Float weights add exactly below 2^53 records.
            sizes = np.bincount(self.grouped[name].astype(np.int64),
                                weights=np.asarray(self.weights, dtype=np.float64),
                                minlength=n_classes)
            return np.rint(sizes).astype(np.int64)
        return np.bincount(self.column(name).astype(np.int64), minlength=n_classes)

    def count_nonzero(self, name: str) -> int:
        """Number of records whose public column ``name`` is not zero."""
        if name not in self.columns and name in self.grouped and self.weights is not None:
            weights = np.asarray(self.weights, dtype=np.int64)
            return int(weights[np.asarray(self.grouped[name]) != 0].sum())
        return int(np.count_nonzero(self.column(name)))


@dataclass(frozen=True, eq=False)
class Kernel:
    """A symmetric kernel of a U-statistic.

    Parameters
    ----------
    name : str
        Short identifier (e.g. ``"auc"``).
    degree : int
        Number of records the kernel takes (k >= 1).
    columns : tuple of str
        Names of the columns of one record; data is an (n, len(columns)) float array.
    output_range : (float, float)
        Every kernel value lies in ``[lo, hi]``; ``sensitivity = hi - lo`` follows.
    func : callable
        Vectorized kernel: ``func(rows_1, ..., rows_k)`` with each ``rows_i`` an
        (m, len(columns)) array returns the m kernel values. Must be symmetric in its
        arguments.
    lipschitz : float or None
        Lipschitz constant of ``f`` in each argument (absolute-value metric on each
        column), or None if the kernel is not Lipschitz (e.g. indicator kernels).
    exact : callable or None
        ``exact(data) -> float``: the complete U-statistic in O(n log n), or None.
    statistic_fn : callable or None
        ``statistic_fn(u, public) -> float`` maps the U-statistic to the reported statistic
        from public quantities only (``public`` is a :class:`PublicData`: n and the public
        columns); None means the identity.
    validate : callable or None
        ``validate(data) -> data``: kernel-specific checks of each record of a packed array
        (binary labels, bounds, ...), returning the (possibly normalized) array. It must
        hold for any number of records, one party's included.
    validate_dataset : callable or None
        ``validate_dataset(data) -> None``: checks that need the whole data set (e.g. every
        class present), run by :meth:`check_data` after the record checks.
    row_sums : callable or None
        Degree 2 only: ``row_sums(data) -> (R, Q)`` with ``R_i = sum_{j != i} f(x_i, x_j)``
        and ``Q_i = sum_{j != i} f(x_i, x_j)^2`` in O(n log n), or None. Gives the Hoeffding
        projection ``h_1(x_i) ~ R_i / (n - 1)`` without evaluating all pairs.
    description : str
        How U relates to the reported statistic, for users.
    adjacency : str
        The neighbouring relation under which ``sensitivity`` bounds the change of one
        record's contribution; private releases state it in their guarantee.
    active_share : callable or None
        ``active_share(public) -> float`` (``public`` a :class:`PublicData`): the largest
        fraction of all k-subsets that contain one given record and on which the kernel is
        not fixed by public information (for AUC, the pairs of a record with the other
        class). None means every subset counts, k / n. It tightens the sensitivity of the
        complete U-statistic to ``active_share * sensitivity``.
    public_columns : tuple of str
        The columns that are public (the labels of a labelled kernel); the rest are private.
    exact_only_statistic_fn : callable or None
        ``exact_only_statistic_fn(u, data) -> float`` for a map that must read private values
        (tau-b's tie correction): only an exact, non-private computation may use it, and
        private protocols refuse such a kernel (``statistic_is_public`` is False).
    statistic_range_fn : callable or None
        ``statistic_range_fn(public) -> (lo, hi)``: the valid range of the reported
        statistic from public quantities (``public`` a :class:`PublicData`), or with
        ``public=None`` the widest range it can take for any n. Only for a kernel with a
        ``statistic_fn``; without one the statistic is U, whose range is ``output_range``.
        None with a ``statistic_fn`` (a user map): no range is known and nothing is clipped.
    monotone_u_range : callable or None
        For a statistic that is a monotone but not affine map of U (Rényi-2's ``-ln U``):
        ``monotone_u_range(public) -> (lo, hi)``, the values of U on which the map is
        finite, which hold the exact U whenever the statistic is finite. A private release
        clips its U into this range before the map and maps U's interval through it
        (post-processing; :meth:`statistic_range` is then the image of this range). None:
        the map is affine (or the identity, or unknown), so a release maps U as it is and
        is clipped into :meth:`statistic_range` afterwards, keeping the raw value.
    """

    name: str
    degree: int
    columns: tuple[str, ...]
    output_range: tuple[float, float]
    func: KernelFunc = field(repr=False)
    lipschitz: float | None = None
    exact: Callable[[np.ndarray], float] | None = field(default=None, repr=False)
    statistic_fn: Callable[[float, PublicData], float] | None = field(default=None, repr=False)
    validate: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    validate_dataset: Callable[[np.ndarray], None] | None = field(default=None, repr=False)
    row_sums: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = field(
        default=None, repr=False)
    description: str = field(default="", repr=False)
    adjacency: str = field(default="replace one record", repr=False)
    active_share: Callable[[PublicData], float] | None = field(default=None, repr=False)
    public_columns: tuple[str, ...] = field(default=(), repr=False)
    exact_only_statistic_fn: Callable[[float, np.ndarray], float] | None = field(
        default=None, repr=False)
    statistic_range_fn: Callable[[PublicData | None], tuple[float, float]] | None = field(
        default=None, repr=False)
    monotone_u_range: Callable[[PublicData], tuple[float, float]] | None = field(
        default=None, repr=False)

    def __post_init__(self) -> None:
        check_positive_int(self.degree, "degree")
        cols = (self.columns,) if isinstance(self.columns, str) else tuple(self.columns)
        if not cols or not all(isinstance(c, str) and c for c in cols):
            raise ValueError(f"columns must be a non-empty sequence of names, got {self.columns!r}")
        if len(set(cols)) != len(cols):
            raise ValueError(f"columns must be distinct, got {cols}")
        object.__setattr__(self, "columns", cols)
        try:
            lo, hi = (float(v) for v in self.output_range)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"output_range must be a pair (lo, hi) of numbers, "
                            f"got {self.output_range!r}") from exc
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"output_range must be finite with lo < hi, got {self.output_range!r}")
        object.__setattr__(self, "output_range", (lo, hi))
        if self.lipschitz is not None:
            lip = float(self.lipschitz)
            if not (math.isfinite(lip) and lip >= 0):
                raise ValueError(f"lipschitz must be a finite number >= 0 or None, "
                                 f"got {self.lipschitz!r}")
            object.__setattr__(self, "lipschitz", lip)
        if not callable(self.func):
            raise TypeError(f"func must be callable, got {type(self.func).__name__}")
        if self.row_sums is not None and self.degree != 2:
            raise ValueError("row_sums is defined for degree-2 kernels only")
        public = ((self.public_columns,) if isinstance(self.public_columns, str)
                  else tuple(self.public_columns))
        unknown = [c for c in public if c not in cols]
        if unknown:
            raise ValueError(f"public_columns {unknown} are not columns of the kernel {cols}")
        object.__setattr__(self, "public_columns", public)
        if self.statistic_fn is not None and self.exact_only_statistic_fn is not None:
            raise ValueError("give statistic_fn (public quantities) or exact_only_statistic_fn "
                             "(reads private values), not both")
        if self.statistic_fn is None and (self.statistic_range_fn is not None
                                          or self.monotone_u_range is not None):
            raise ValueError("statistic_range_fn and monotone_u_range describe a "
                             "statistic_fn; a kernel without one reports U, whose range is "
                             "output_range")

    # ---------------------------------------------------------------- properties
    @property
    def sensitivity(self) -> float:
        """Largest change of one kernel value: ``hi - lo`` of ``output_range``."""
        return self.output_range[1] - self.output_range[0]

    @property
    def n_columns(self) -> int:
        return len(self.columns)

    @property
    def statistic_is_public(self) -> bool:
        """True when the map from U to the statistic reads public quantities only, so
        applying it to a private U is post-processing (False for tau-b)."""
        return self.exact_only_statistic_fn is None

    def public_description(self) -> dict[str, Any]:
        """What fixes this kernel's values and guarantee, as data a configuration check
        compares: name, columns, ranges, and each function by its qualified name, with the
        public parameters bound into it (``gini_kernel``'s declared ``bounds``) lifted to
        the top so a difference reads ``kernel.bounds``."""
        described: dict[str, Any] = {
            "name": self.name, "degree": self.degree, "columns": self.columns,
            "public_columns": self.public_columns, "output_range": self.output_range,
            "lipschitz": self.lipschitz, "adjacency": self.adjacency}
        for name in ("func", "exact", "statistic_fn", "validate", "validate_dataset",
                     "row_sums", "active_share", "exact_only_statistic_fn",
                     "statistic_range_fn", "monotone_u_range"):
            function = getattr(self, name)
            if isinstance(function, partial) and not function.args and not (
                    set(function.keywords) & set(described)):
                described.update(function.keywords)
                function = function.func
            described[name] = function
        return described

    def statistic_range(self, public: PublicData | None = None) -> tuple[float, float] | None:
        """The valid range of the reported statistic, or None where none is known.

        A U-statistic is a mean of kernel values, so U lies in ``output_range`` (Hoeffding
        1948, Sec. 3), and so does a statistic that is U itself (tau-b too: a correlation).
        A map to another scale declares its range (``statistic_range_fn``: AUC and VUS in
        [0, 1], Mann-Whitney in [0, n+ n-], Rényi-2 in [0, ln C(n,2)]); ``public`` (n and
        the public columns) gives the range of this data set, ``None`` the widest one for
        any n. A user map without a declared range gives None (nothing is clipped).

        Examples
        --------
        >>> from fedustat.stats import kernels
        >>> kernels.auc_kernel().statistic_range(), kernels.gini_kernel((0, 3)).statistic_range()
        ((0.0, 1.0), (0.0, 3.0))
        >>> kernels.renyi2_entropy_kernel().statistic_range(kernels.PublicData(4))
        (0.0, 1.791759469228055)
        """
        if self.statistic_fn is None:
            return self.output_range
        if self.statistic_range_fn is None:
            return None
        low, high = self.statistic_range_fn(public)
        return float(low), float(high)

    # ---------------------------------------------------------------- data
    def pack(self, *columns: Any) -> np.ndarray:
        """Stack one array per column into the (n, len(columns)) data array, checked.

        Example: ``auc_kernel().pack(scores, labels)``.
        """
        if len(columns) != self.n_columns:
            raise ValueError(f"kernel {self.name!r} takes {self.n_columns} column(s) "
                             f"{self.columns}, got {len(columns)}")
        arrays = [_as_column(col, name) for col, name in zip(columns, self.columns, strict=True)]
        check_consistent_length(**dict(zip(self.columns, arrays, strict=True)))
        return self.check_data(np.column_stack(arrays))

    def check_data(self, data: Any) -> np.ndarray:
        """Validate a data array (shape, finiteness, kernel-specific rules) and return it.

        A 1-D array is accepted for one-column kernels. Needs at least ``degree`` records.
        """
        arr = self.check_records(data)
        if arr.shape[0] < self.degree:
            raise ValueError(f"data has {arr.shape[0]} record(s); a kernel of degree "
                             f"{self.degree} needs at least {self.degree}")
        if self.validate_dataset is not None:
            self.validate_dataset(arr)
        return arr

    def check_records(self, data: Any) -> np.ndarray:
        """Validate any number of records (a party's own, possibly one) against the
        kernel's public domain: shape, finiteness, labels, declared bounds.

        Every protocol runs this in the party's own step (``Protocol.init_parties``), so
        every transport enforces it. A failure raises
        :class:`~fedustat._validation.RecordCheckError`: its message may quote the
        records' values and stays with their holder; its ``check`` names the public check
        that failed, all a transport sends on.
        """
        with RecordCheck("records that are not finite numbers"):
            arr = as_float_array(data, "data", ndim=(1, 2))
        if arr.ndim == 1:
            if self.n_columns != 1:
                raise RecordCheckError(f"data is 1-D but kernel {self.name!r} needs "
                                       f"{self.n_columns} columns {self.columns}; build it "
                                       f"with kernel.pack(...)")
            arr = arr[:, None]
        if arr.shape[1] != self.n_columns:
            raise RecordCheckError(f"data has {arr.shape[1]} column(s) but kernel "
                                   f"{self.name!r} needs {self.n_columns} {self.columns}; "
                                   "build it with kernel.pack(...)")
        if self.validate is not None and arr.shape[0]:
            # The built-in validators name their check; a user's is named by its kernel.
            with RecordCheck(f"values outside the public domain of kernel {self.name!r}"):
                arr = self.validate(arr)
        return arr

    def public_view(self, data: Any) -> PublicData:
        """n and the public columns of ``data`` (checked records): all a release may read."""
        arr = self.check_records(data)
        cols = {name: arr[:, self.columns.index(name)].copy() for name in self.public_columns}
        return PublicData(arr.shape[0], cols)

    def check_tuples(self, tuples: Any, n: int) -> np.ndarray:
        """Validate an (m, degree) array of index tuples into n records; return int64."""
        idx = np.asarray(tuples)
        if idx.ndim != 2 or idx.shape[1] != self.degree:
            raise ValueError(f"tuples must have shape (m, {self.degree}) for a kernel of degree "
                             f"{self.degree}, got shape {idx.shape}")
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"tuples must hold integer indices, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"tuples has indices outside [0, {n}) (min {idx.min()}, "
                             f"max {idx.max()})")
        if self.degree > 1 and idx.size:
            srt = np.sort(idx, axis=1)
            if np.any(srt[:, 1:] == srt[:, :-1]):
                raise ValueError("tuples has a row with a repeated index; a U-statistic "
                                 "averages over tuples of distinct records")
        return idx

    # ---------------------------------------------------------------- evaluation
    def _evaluate_unchecked(self, data: np.ndarray, tuples: np.ndarray) -> np.ndarray:
        values = np.asarray(self.func(*(data[tuples[:, c]] for c in range(self.degree))),
                            dtype=np.float64)
        if values.shape != (tuples.shape[0],):
            raise ValueError(f"kernel {self.name!r} returned shape {values.shape} for "
                             f"{tuples.shape[0]} tuples; func must return one value per tuple")
        lo, hi = self.output_range
        slack = 1e-12 * max(1.0, abs(lo), abs(hi))
        if values.size and not (np.all(np.isfinite(values)) and values.min() >= lo - slack
                                and values.max() <= hi + slack):
            raise ValueError(f"kernel {self.name!r} returned values outside its declared "
                             f"output_range [{lo}, {hi}] (or non-finite values); the "
                             "sensitivity would be wrong")
        return values

    def evaluate(self, data: Any, tuples: Any) -> np.ndarray:
        """Kernel values on each index tuple.

        Parameters
        ----------
        data : array_like of shape (n, len(columns))
        tuples : array_like of int, shape (m, degree)
            Rows of distinct record indices.

        Returns
        -------
        ndarray of shape (m,)
        """
        arr = self.check_data(data)
        return self._evaluate_unchecked(arr, self.check_tuples(tuples, arr.shape[0]))

    def statistic(self, u: float, public: PublicData | Any) -> float:
        """Map the U-statistic ``u`` to the reported statistic (see the module table).

        ``public`` is a :class:`PublicData`, or records from which only n and the public
        columns are taken; ``statistic_fn`` never sees a private value. A kernel whose map
        reads private values (tau-b) needs the records and is for exact computation only.
        """
        if self.exact_only_statistic_fn is not None:
            if isinstance(public, PublicData):
                raise ValueError(f"kernel {self.name!r}: the map from U to the statistic reads "
                                 "private values, so it cannot be applied to a release; only "
                                 "exact (non-private) computation may use it")
            return float(self.exact_only_statistic_fn(float(u), self.check_data(public)))
        if self.statistic_fn is None:
            return float(u)
        view = public if isinstance(public, PublicData) else self.public_view(public)
        return float(self.statistic_fn(float(u), view))

    def active_share_of(self, public: PublicData) -> float:
        """Largest fraction of the k-subsets one record is in with a value not fixed by public
        information (see ``active_share``); ``degree / n`` by default."""
        if self.active_share is None:
            return self.degree / public.n
        return float(self.active_share(public))

    def statistic_slope(self, u: float, public: PublicData | Any) -> float:
        """|d statistic / d U| at ``u`` (delta method for standard errors; nan if undefined).

        Private protocols evaluate it at the released U with public quantities only, so the
        error bar they derive from it costs no privacy.
        """
        if self.statistic_fn is None and self.exact_only_statistic_fn is None:
            return 1.0
        h = 1e-6 * max(1.0, abs(u))
        low, high = u - h, u + h
        if self.monotone_u_range is not None and isinstance(public, PublicData):
            # A relative step kept inside the range where the map is finite: -ln U near
            # its floor 1 / C(n,2) needs a step far below 1e-6.
            lo, hi = self.monotone_u_range(public)
            h = 1e-6 * abs(u) if u != 0.0 else 1e-6 * (hi - lo)
            low, high = max(u - h, lo), min(u + h, hi)
            if not low < high:
                return 0.0
        slope = abs(self.statistic(high, public) - self.statistic(low, public)) / (high - low)
        return float(slope) if math.isfinite(slope) else math.nan

    def statistic_with_error(self, u: float, u_std_error: float, public: PublicData | Any
                             ) -> tuple[float, float | None]:
        """The statistic at a released U and its delta-method standard error.

        ``public`` as in :meth:`statistic`; the error is None where the slope is undefined.
        """
        if self.statistic_fn is None and self.exact_only_statistic_fn is None:
            return u, u_std_error
        slope = self.statistic_slope(u, public)
        return self.statistic(u, public), (u_std_error * slope if math.isfinite(slope) else None)

    def __repr__(self) -> str:
        lip = "" if self.lipschitz is None else f", lipschitz={self.lipschitz:g}"
        fast = ", exact fast path" if self.exact is not None else ""
        return (f"Kernel({self.name!r}, degree={self.degree}, columns={self.columns}, "
                f"output_range={self.output_range}{lip}{fast})")


def _as_column(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == bool:
        arr = arr.astype(np.float64)
    return as_float_array(arr, name)


# --------------------------------------------------------------------------------------
# Shared validators
# --------------------------------------------------------------------------------------


def _validate_binary_labels(data: np.ndarray, column: int, name: str) -> np.ndarray:
    with RecordCheck(f"labels that are not binary in column {name!r}"):
        labels = as_binary_labels(data[:, column], name, require_both=False)
    if not np.array_equal(labels, data[:, column]):
        data = data.copy()
        data[:, column] = labels
    return data


def _validate_auc(data: np.ndarray) -> np.ndarray:
    return _validate_binary_labels(data, 1, "label")


def _validate_auc_dataset(data: np.ndarray) -> None:
    as_binary_labels(data[:, 1], "label")  # both classes present


def _validate_bounded(data: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    with RecordCheck("values outside the declared bounds of column 'x'"):
        check_bounds(data[:, 0], bounds, "x")
    return data


def _validate_vus(data: np.ndarray) -> np.ndarray:
    with RecordCheck("class codes that are not ordinal in column 'class'"):
        check_ordinal_values(data[:, 1], "class")
    return data


def _validate_vus_dataset(data: np.ndarray) -> None:
    check_ordinal_classes(data[:, 1], "class")


def _check_bounds_arg(bounds: Any) -> tuple[float, float]:
    return check_bounds_pair(bounds, "bounds")


# --------------------------------------------------------------------------------------
# AUC and Mann-Whitney U (same kernel, 000 Sec. 2.1.2 with ties counted 1/2)
# --------------------------------------------------------------------------------------


def _auc_func(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sa, la, sb, lb = a[:, 0], a[:, 1], b[:, 0], b[:, 1]
    pos_higher = np.where(la > lb, sa > sb, sb > sa)
    return (la != lb) * (pos_higher + 0.5 * (sa == sb))


def _auc_exact(data: np.ndarray) -> float:
    twice, _, _ = auc_twice_numerator(data[:, 0], data[:, 1])
    n = data.shape[0]
    return twice / (n * (n - 1))


def _auc_rows(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return auc_row_sums(data[:, 0], data[:, 1])


def _class_sizes(public: PublicData) -> tuple[int, int]:
    n_pos = public.count_nonzero("label")
    return n_pos, public.n - n_pos


def _unit_range(public: PublicData | None) -> tuple[float, float]:
    """AUC and VUS are probabilities (000 Sec. 4): [0, 1] whatever the data."""
    return 0.0, 1.0


def _mann_whitney_range(public: PublicData | None) -> tuple[float, float]:
    """The Mann-Whitney U counts (positive, negative) pairs: [0, n+ n-]."""
    if public is None:
        return 0.0, math.inf
    n_pos, n_neg = _class_sizes(public)
    return 0.0, float(n_pos * n_neg)


def _auc_statistic(u: float, public: PublicData) -> float:
    n_pos, n_neg = _class_sizes(public)
    if n_pos == 0 or n_neg == 0:
        # A whole-run check on public counts (e.g. the reports of a collection window).
        missing = "positive" if n_pos == 0 else "negative"
        raise ValueError(f"no {missing} example among the parties; the AUC needs both "
                         "classes")
    return u * n_pairs(public.n) / (n_pos * n_neg)


def _mann_whitney_statistic(u: float, public: PublicData) -> float:
    return u * n_pairs(public.n)


def _auc_active_share(public: PublicData) -> float:
    # A record's kernel value can only be non-zero with records of the other class:
    # max(n+, n-) of the C(n, 2) pairs, so Delta AUC = 1 / min(n+, n-).
    n_pos, n_neg = _class_sizes(public)
    return max(n_pos, n_neg) / n_pairs(public.n)


def auc_kernel() -> Kernel:
    """AUC kernel on records (score, label).

    ``f = 1`` if the labels differ and the positive record has the higher score, ``1/2`` if
    the labels differ and the scores tie, 0 otherwise (000 Sec. 2.1.2, ties as in
    ``sklearn.metrics.roc_auc_score``). ``U = n+ n- AUC / C(n,2)``, so
    ``statistic(U) = U C(n,2) / (n+ n-)`` is the AUC. Labels may be 0/1, -1/1 or booleans
    (stored as 0/1); both classes must be present.
    """
    return Kernel(
        name="auc", degree=2, columns=("score", "label"), output_range=(0.0, 1.0),
        func=_auc_func, exact=_auc_exact, statistic_fn=_auc_statistic, validate=_validate_auc,
        validate_dataset=_validate_auc_dataset,
        row_sums=_auc_rows, description="AUC = U * C(n,2) / (n_pos * n_neg)",
        adjacency=LABELS_PUBLIC, active_share=_auc_active_share, public_columns=("label",),
        statistic_range_fn=_unit_range,
    )


def mann_whitney_kernel() -> Kernel:
    """Mann-Whitney kernel: the AUC kernel, reported as ``U C(n,2)``.

    ``statistic(U)`` equals ``scipy.stats.mannwhitneyu(pos_scores, neg_scores).statistic``:
    the number of (positive, negative) pairs with the positive scored higher, ties 1/2.
    """
    return Kernel(
        name="mann_whitney", degree=2, columns=("score", "label"), output_range=(0.0, 1.0),
        func=_auc_func, exact=_auc_exact, statistic_fn=_mann_whitney_statistic,
        validate=_validate_auc, validate_dataset=_validate_auc_dataset, row_sums=_auc_rows,
        description="Mann-Whitney U = U * C(n,2)",
        adjacency=LABELS_PUBLIC, active_share=_auc_active_share, public_columns=("label",),
        statistic_range_fn=_mann_whitney_range,
    )


# --------------------------------------------------------------------------------------
# Kendall's tau (000 eq. 6, 002 eq. 8)
# --------------------------------------------------------------------------------------


def _kendall_func(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sign(a[:, 0] - b[:, 0]) * np.sign(a[:, 1] - b[:, 1])


def _kendall_exact(data: np.ndarray) -> float:
    cmd, tot, _, _ = kendall_counts(data[:, 0], data[:, 1])
    return cmd / tot


def _kendall_b_statistic(u: float, data: np.ndarray) -> float:
    tot = n_pairs(data.shape[0])
    ties = []
    for col, name in ((0, "x"), (1, "y")):
        _, counts = np.unique(data[:, col], return_counts=True)
        t = tie_pairs(counts)
        if t == tot:
            raise ValueError(f"{name} is constant; Kendall's tau-b is undefined")
        ties.append(t)
    return float(u * tot / np.sqrt(tot - ties[0]) / np.sqrt(tot - ties[1]))


def kendall_tau_kernel(variant: str = "b") -> Kernel:
    """Kendall kernel ``sign(x_i - x_j) sign(y_i - y_j)`` on records (x, y).

    ``U = (C - D) / C(n,2)`` is tau-a. For ``variant="b"``, ``statistic(U)`` rescales it to
    tau-b, ``U C(n,2) / sqrt((C(n,2) - T_x)(C(n,2) - T_y))`` with T_x, T_y the pairs tied in
    x, in y, as ``scipy.stats.kendalltau``. Output range [-1, 1]: sensitivity 2.
    """
    if variant not in ("a", "b"):
        raise ValueError(f"variant must be 'a' or 'b', got {variant!r}")
    return Kernel(
        name=f"kendall_tau_{variant}", degree=2, columns=("x", "y"), output_range=(-1.0, 1.0),
        func=_kendall_func, exact=_kendall_exact,
        exact_only_statistic_fn=_kendall_b_statistic if variant == "b" else None,
        description=("tau-a = U" if variant == "a"
                     else "tau-b = U * C(n,2) / sqrt((C(n,2) - T_x) (C(n,2) - T_y))"),
    )


def _tie_func(column: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a[:, column] == b[:, column]).astype(np.float64)


def _tie_exact(column: int, data: np.ndarray) -> float:
    return duplicate_pair_ratio_unchecked(data[:, column])


def _tie_rows(column: int, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return duplicate_row_sums(data[:, column])


def kendall_tie_kernel(column: str) -> Kernel:
    """Tie kernel ``I[x_i = x_j]`` (``column="x"``) or ``I[y_i = y_j]`` (``"y"``) on
    Kendall's records (x, y).

    Its U-statistic is the fraction ``T_x / C(n,2)`` (or ``T_y / C(n,2)``) of pairs tied
    in that column: with tau-a's U, the three U-statistics tau-b is a function of,
    ``tau_b = U / sqrt((1 - T_x/C(n,2)) (1 - T_y/C(n,2)))`` (Kendall 1945, Biometrika 33,
    239-251; ``scipy.stats.kendalltau``). Output range [0, 1]: sensitivity 1.
    """
    if column not in ("x", "y"):
        raise ValueError(f"column must be 'x' or 'y', got {column!r}")
    index = ("x", "y").index(column)
    return Kernel(
        name=f"kendall_ties_{column}", degree=2, columns=("x", "y"), output_range=(0.0, 1.0),
        func=partial(_tie_func, index), exact=partial(_tie_exact, index),
        row_sums=partial(_tie_rows, index),
        description=f"fraction of pairs tied in {column} = U",
    )


# --------------------------------------------------------------------------------------
# Gini mean difference and sample variance (000 eq. 4 and Remark 1)
# --------------------------------------------------------------------------------------


def _gini_func(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a[:, 0] - b[:, 0])


def _gini_exact(data: np.ndarray) -> float:
    return gini_mean_difference_unchecked(data[:, 0])


def _gini_rows(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return gini_row_sums(data[:, 0])


def gini_kernel(bounds: tuple[float, float]) -> Kernel:
    """Gini mean difference kernel ``|x_i - x_j|`` on records (x,), values in ``bounds``.

    ``U`` is the Gini mean difference (000 eq. 4). The declared bounds fix the output range
    ``[0, hi - lo]`` (hence the sensitivity); data outside them is refused. Lipschitz 1.
    """
    lo, hi = _check_bounds_arg(bounds)
    return Kernel(
        name="gini_mean_difference", degree=2, columns=("x",), output_range=(0.0, hi - lo),
        func=_gini_func, lipschitz=1.0, exact=_gini_exact, row_sums=_gini_rows,
        validate=partial(_validate_bounded, bounds=(lo, hi)),
        description="Gini mean difference = U",
    )


def _variance_func(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return 0.5 * (a[:, 0] - b[:, 0]) ** 2


def _variance_exact(data: np.ndarray) -> float:
    return float(np.var(data[:, 0], ddof=1))


def _variance_rows(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return variance_row_sums(data[:, 0])


def variance_kernel(bounds: tuple[float, float]) -> Kernel:
    """Sample-variance kernel ``(x_i - x_j)^2 / 2`` on records (x,), values in ``bounds``.

    ``U`` equals ``np.var(x, ddof=1)`` (000 Remark 1). Output range ``[0, (hi - lo)^2 / 2]``;
    Lipschitz constant ``hi - lo`` (the derivative ``|x_i - x_j|`` is at most that).
    """
    lo, hi = _check_bounds_arg(bounds)
    return Kernel(
        name="variance", degree=2, columns=("x",), output_range=(0.0, 0.5 * (hi - lo) ** 2),
        func=_variance_func, lipschitz=hi - lo, exact=_variance_exact, row_sums=_variance_rows,
        validate=partial(_validate_bounded, bounds=(lo, hi)),
        description="sample variance (ddof=1) = U",
    )


# --------------------------------------------------------------------------------------
# Duplicate-pair ratio and Rényi-2 entropy (000 eq. 5)
# --------------------------------------------------------------------------------------


def _duplicate_func(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a[:, 0] == b[:, 0]).astype(np.float64)


def _duplicate_exact(data: np.ndarray) -> float:
    return duplicate_pair_ratio_unchecked(data[:, 0])


def _duplicate_rows(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return duplicate_row_sums(data[:, 0])


def _renyi2_statistic(u: float, public: PublicData) -> float:
    return math.inf if u <= 0.0 else -math.log(u)


def _renyi2_u_range(public: PublicData) -> tuple[float, float]:
    """U is the share of equal pairs among the C(n,2): a positive U is at least
    1 / C(n,2), where -ln U is finite and largest."""
    return 1.0 / n_pairs(public.n), 1.0


def _renyi2_range(public: PublicData | None) -> tuple[float, float]:
    """-ln U over :func:`_renyi2_u_range`: [0, ln C(n,2)] (any n: [0, inf))."""
    if public is None:
        return 0.0, math.inf
    return 0.0, math.log(n_pairs(public.n))


def duplicate_pair_kernel() -> Kernel:
    """Duplicate-pair kernel ``I[x_i = x_j]`` on records (x,); ``U`` is the duplicate-pair ratio."""
    return Kernel(
        name="duplicate_pair_ratio", degree=2, columns=("x",), output_range=(0.0, 1.0),
        func=_duplicate_func, exact=_duplicate_exact, row_sums=_duplicate_rows,
        description="duplicate-pair ratio = U",
    )


def renyi2_entropy_kernel() -> Kernel:
    """Rényi-2 entropy: kernel ``I[x_i = x_j]``, reported as ``-ln U`` (000 eq. 5).

    ``statistic(0)`` is ``inf`` (no two records equal). A private release clips its noisy
    U into ``[1 / C(n,2), 1]`` before the map (``monotone_u_range``: a positive U counts
    at least one equal pair of the C(n,2)), so it is finite and in ``[0, ln C(n,2)]``; a
    release at ``ln C(n,2)`` reads "at least ln C(n,2)" (no equal pair, or too few for
    the noise to tell). Its interval is U's interval mapped through ``-ln``.
    """
    return Kernel(
        name="renyi2_entropy", degree=2, columns=("x",), output_range=(0.0, 1.0),
        func=_duplicate_func, exact=_duplicate_exact, statistic_fn=_renyi2_statistic,
        row_sums=_duplicate_rows,
        description="Rényi-2 entropy = -ln U",
        statistic_range_fn=_renyi2_range, monotone_u_range=_renyi2_u_range,
    )


# --------------------------------------------------------------------------------------
# Rand index
# --------------------------------------------------------------------------------------


def _rand_func(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ((a[:, 0] == b[:, 0]) == (a[:, 1] == b[:, 1])).astype(np.float64)


def _rand_exact(data: np.ndarray) -> float:
    return rand_index_unchecked(data[:, 0], data[:, 1])


def _rand_rows(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return rand_row_sums(data[:, 0], data[:, 1])


def rand_index_kernel() -> Kernel:
    """Rand-index kernel on records (a, b) of two cluster labels.

    ``f = 1`` if both clusterings put the two records together, or both apart; ``U`` is the
    Rand index (equals ``sklearn.metrics.rand_score``). 002 eq. 11 is garbled (it compares
    C_1(x_i) with C_2(x_j)); this is the standard definition.
    """
    return Kernel(
        name="rand_index", degree=2, columns=("a", "b"), output_range=(0.0, 1.0),
        func=_rand_func, exact=_rand_exact, row_sums=_rand_rows, description="Rand index = U",
    )


# --------------------------------------------------------------------------------------
# Volume under the ROC surface (degree 3)
# --------------------------------------------------------------------------------------


def _order_weight(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """1 if lo < hi, 1/2 if equal, 0 otherwise."""
    return (lo < hi) + 0.5 * (lo == hi)


def _vus_func(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    ca, cb, cc = a[:, 1], b[:, 1], c[:, 1]
    one_each = (ca != cb) & (cb != cc) & (ca != cc)
    scores = []
    for k in (0.0, 1.0, 2.0):
        scores.append(a[:, 0] * (ca == k) + b[:, 0] * (cb == k) + c[:, 0] * (cc == k))
    s0, s1, s2 = scores
    weight = _order_weight(s0, s1) * _order_weight(s1, s2)
    # the product gives 1/4 to a three-way tie; uniform tie-breaking gives 1/6
    weight = np.where((s0 == s1) & (s1 == s2), 1.0 / 6.0, weight)
    return one_each * weight


def _vus_exact(data: np.ndarray) -> float:
    twelve, _, _, _ = vus_twelve_numerator(data[:, 0], data[:, 1])
    return twelve / (12 * math.comb(data.shape[0], 3))


def _vus_statistic(u: float, public: PublicData) -> float:
    counts = public.class_sizes("class", 3)
    return u * math.comb(public.n, 3) / (int(counts[0]) * int(counts[1]) * int(counts[2]))


def _vus_active_share(public: PublicData) -> float:
    # Only triples with one record of each class count: a class-c record is in the
    # product of the other two class sizes of them.
    sizes = public.class_sizes("class", 3).astype(np.float64)
    n = public.n
    most = max(sizes[1] * sizes[2], sizes[0] * sizes[2], sizes[0] * sizes[1])
    return float(most / math.comb(n, 3))


def vus_kernel() -> Kernel:
    """Volume-under-the-ROC-surface kernel (degree 3) on records (score, class), class in {0,1,2}.

    On a triple with one record of each class and scores s0, s1, s2 (by class), ``f`` is the
    probability that breaking ties uniformly at random gives ``s0 < s1 < s2``: 1 if strictly
    ordered, 1/2 if ``s0 = s1 < s2`` or ``s0 < s1 = s2``, 1/6 if all three tie, else 0;
    ``f = 0`` on triples without one record of each class. ``U = n0 n1 n2 VUS / C(n,3)``, so
    ``statistic(U) = U C(n,3) / (n0 n1 n2)`` estimates ``P(S_0 < S_1 < S_2)``.
    """
    return Kernel(
        name="vus", degree=3, columns=("score", "class"), output_range=(0.0, 1.0),
        func=_vus_func, exact=_vus_exact, statistic_fn=_vus_statistic, validate=_validate_vus,
        validate_dataset=_validate_vus_dataset,
        description="VUS = U * C(n,3) / (n0 * n1 * n2)",
        adjacency=LABELS_PUBLIC, active_share=_vus_active_share, public_columns=("class",),
        statistic_range_fn=_unit_range,
    )


# --------------------------------------------------------------------------------------
# User kernels
# --------------------------------------------------------------------------------------


def user_kernel(
    func: KernelFunc,
    degree: int,
    columns: str | Sequence[str],
    output_range: tuple[float, float],
    lipschitz: float | None = None,
    name: str = "user",
    *,
    statistic_fn: Callable[[float, PublicData], float] | None = None,
    public_columns: str | Sequence[str] = (),
) -> Kernel:
    """A kernel from a vectorized Python callable.

    Parameters
    ----------
    func : callable
        ``func(rows_1, ..., rows_degree)``; each ``rows_i`` is an (m, len(columns)) float
        array (row t of each is one record of tuple t); returns m values. It must be
        symmetric in its arguments (checked when the kernel is made, on probe records:
        an asymmetric ``func`` is refused) and stay within ``output_range`` (checked on
        every evaluation).
    degree : int
    columns : str or sequence of str
    output_range : (float, float)
    lipschitz : float, optional
    name : str
    statistic_fn : callable, optional
        ``statistic_fn(u, public) -> float``: the map from the U-statistic to the reported
        statistic; identity by default. ``public`` is a :class:`PublicData` holding n and
        the columns named in ``public_columns``, never a private value, so the map applied
        to a private U stays private.
    public_columns : str or sequence of str
        Columns whose values are public (e.g. labels); the map may read them.
    """
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    cols = (columns,) if isinstance(columns, str) else tuple(columns)
    kernel = Kernel(name=name, degree=degree, columns=cols, output_range=output_range,
                    func=func, lipschitz=lipschitz, statistic_fn=statistic_fn,
                    public_columns=public_columns, description="user-defined kernel")
    _check_symmetric(func, kernel.degree, len(cols))
    return kernel


#: Probe tuples of the symmetry check: half with values in {0, 1} (valid labels, codes and
#: categories), half uniform in [0, 1]; fixed, so the check is the same on every run.
_PROBE_TUPLES = 16


def _check_symmetric(func: KernelFunc, degree: int, n_columns: int) -> None:
    """Refuse a ``func`` that changes when two of its arguments are swapped.

    A U-statistic averages its kernel over unordered tuples (Hoeffding 1948, Sec. 3), so an
    asymmetric kernel's value would depend on the order the protocol happens to list a
    tuple in. Swapping neighbouring arguments generates every permutation, so ``degree -
    1`` swaps cover them all on the probe tuples. A ``func`` that rejects the probe values
    (e.g. a domain check of its own) is not judged here.
    """
    probe = np.random.default_rng(20240611)
    half = _PROBE_TUPLES // 2
    tuples = np.concatenate([probe.integers(0, 2, (half, degree, n_columns)).astype(float),
                             probe.uniform(0.0, 1.0, (half, degree, n_columns))])
    rows = [tuples[:, i, :] for i in range(degree)]
    try:
        with np.errstate(all="ignore"):
            base = np.asarray(func(*rows), dtype=np.float64)
            outputs = []
            for i in range(degree - 1):
                swapped = [*rows]
                swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
                outputs.append(np.asarray(func(*swapped), dtype=np.float64))
    except Exception:  # func refuses the probe values: it cannot be judged on them
        return
    for i, other in enumerate(outputs):
        if other.shape != base.shape or base.shape != (_PROBE_TUPLES,):
            return
        differ = ~np.isclose(base, other, rtol=1e-9, atol=1e-12, equal_nan=True)
        if np.any(differ):
            t = int(np.argmax(differ))
            raise ValueError(
                f"func is not symmetric in its arguments: on the probe tuple "
                f"{tuples[t].tolist()} it gives {base[t]:g}, and {other[t]:g} with arguments "
                f"{i + 1} and {i + 2} swapped; a U-statistic's kernel must be symmetric "
                "(average func over the orders of its arguments, e.g. "
                "lambda a, b: (f(a, b) + f(b, a)) / 2)")


#: Built-in kernel factories by name (Gini and variance need ``bounds=(lo, hi)``).
KERNEL_FACTORIES: dict[str, Callable[..., Kernel]] = {
    "auc": auc_kernel,
    "mann_whitney": mann_whitney_kernel,
    "kendall_tau": kendall_tau_kernel,
    "gini_mean_difference": gini_kernel,
    "duplicate_pair_ratio": duplicate_pair_kernel,
    "renyi2_entropy": renyi2_entropy_kernel,
    "rand_index": rand_index_kernel,
    "variance": variance_kernel,
    "vus": vus_kernel,
}
