"""Every registered protocol and every release function, on small data sets with a neighbour.

Shared by the release-privacy test (``test_release_privacy.py``). A case runs one release
on data D or on a neighbour D' that differs in one record under the release's adjacency
(a replaced record; a replaced score with the labels public; a flipped label for label
DP), with a given seed, and names the fields the release documents as DP outputs.

``flatten`` turns any release (an :class:`~fedustat.protocols.base.Estimate` or a release
object such as a private ECDF) into dotted paths and values, following dataclasses,
mappings, sequences and plain objects down to numbers, strings and arrays.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

import fedustat
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate
from fedustat.protocols.ecdf import (
    FssECDF,
    PointwiseECDF,
    dp_ecdf,
    dp_hosmer_lemeshow,
    dp_prefix_sums,
    dp_quantile,
    dp_roc_curve,
    fss_ecdf,
    isotonic_projection,
    pointwise_ecdf,
    smooth,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
    renyi2_entropy_kernel,
)
from fedustat.stats.kernels import Kernel

EPSILON = 1.0


@dataclass(frozen=True)
class ReleaseCase:
    """One release on D and on its neighbour D'."""

    name: str
    run: Callable[[np.ndarray, int], Any]
    data: np.ndarray
    neighbour: np.ndarray
    released_fields: tuple[str, ...]
    public_coin_fields: tuple[str, ...] = ()
    protocol: Any = None  # the registered protocol the case runs, where there is one


# ------------------------------------------------------------------------------ flatten


def flatten(obj: Any, prefix: str = "", out: dict[str, Any] | None = None,
            _seen: set[int] | None = None) -> dict[str, Any]:
    """Dotted paths to the leaves of a release (numbers, strings, arrays, None)."""
    out = {} if out is None else out
    seen = set() if _seen is None else _seen
    key = prefix or "<root>"
    if obj is None or isinstance(obj, str | bytes | bool | int | float | complex | Enum
                                 | np.generic):
        out[key] = obj
        return out
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            for i, item in enumerate(obj.ravel()):
                flatten(item, f"{prefix}.{i}" if prefix else str(i), out, seen)
        else:
            out[key] = obj
        return out
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items: Any = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    elif isinstance(obj, Mapping):
        items = ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, list | tuple):
        if obj and all(isinstance(v, int | float | np.number) and not isinstance(v, bool)
                       for v in obj):
            out[key] = np.asarray(obj, dtype=float)
            return out
        items = ((str(i), v) for i, v in enumerate(obj))
    elif hasattr(obj, "__dict__"):
        items = ((k, v) for k, v in vars(obj).items() if not k.startswith("_"))
    elif hasattr(obj, "__slots__"):
        items = ((k, getattr(obj, k)) for k in obj.__slots__ if hasattr(obj, k))
    else:
        out[key] = repr(obj)
        return out
    for name, value in items:
        flatten(value, f"{prefix}.{name}" if prefix else name, out, seen)
    return out


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return repr(a) == repr(b)


def leaked_fields(first: Any, second: Any, released: tuple[str, ...]) -> list[str]:
    """Paths whose values differ between the two releases and that no pattern of
    ``released`` covers (a path missing on one side counts as differing)."""
    a, b = flatten(first), flatten(second)
    differing = sorted(p for p in set(a) | set(b)
                       if p not in a or p not in b or not same(a[p], b[p]))
    return [p for p in differing if not any(fnmatch.fnmatchcase(p, pat) for pat in released)]


# ------------------------------------------------------------------------------ data


def _replace(data: np.ndarray, row: int, column: int, value: float) -> np.ndarray:
    out = data.copy()
    out[row, column] = value
    return out


def labelled(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(score, label) records; the neighbour moves a positive's score from low to high."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    scores = np.clip(rng.normal(0.5, 0.15, n) + 0.1 * labels, 0.0, 1.0)
    data = auc_kernel().pack(scores, labels)
    row = int(np.flatnonzero(labels == 1)[np.argmin(scores[labels == 1])])
    return data, _replace(data, row, 0, 1.0)


def flipped_label(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(score, label) records; the neighbour flips the label of the top-scored sample."""
    data, _ = labelled(n, seed)
    row = int(np.argmax(data[:, 0]))
    return data, _replace(data, row, 1, 1.0 - data[row, 1])


def integer_scores(n: int = 120, d: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(score, label) with integer scores in [0, d); a positive's score moves to d - 1."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    scores = np.clip(rng.integers(0, d - 4, n) + 3 * labels, 0, d - 1).astype(float)
    data = auc_kernel().pack(scores, labels)
    row = int(np.flatnonzero(labels == 1)[np.argmin(scores[labels == 1])])
    return data, _replace(data, row, 0, float(d - 1))


def unit_values(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One column in [0, 1]; the neighbour moves the smallest value to 1."""
    rng = np.random.default_rng(seed)
    x = rng.beta(2.0, 5.0, n)[:, None]
    return x, _replace(x, int(np.argmin(x[:, 0])), 0, 1.0)


def pairs_xy(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) in [0, 1]^2, positively related; the neighbour moves one record to a corner."""
    rng = np.random.default_rng(seed)
    x = rng.random(n)
    y = np.clip(x + rng.normal(0.0, 0.2, n), 0.0, 1.0)
    data = np.column_stack([x, y])
    row = int(np.argmin(x + y))
    out = data.copy()
    out[row] = (1.0, 0.0)
    return data, out


def categories(n: int = 120, k: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Integer categories 0..k-1; the neighbour moves one record to another category."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, k, n).astype(float)[:, None]
    return x, _replace(x, 0, 0, float((int(x[0, 0]) + 1) % k))


# ------------------------------------------------------------------------------ cases


def _protocol_case(label: str, name: str, kernel: Kernel, data: tuple[np.ndarray, np.ndarray],
                   epsilon: float = EPSILON, **params: Any) -> ReleaseCase:
    protocol = registry.make(name, kernel, epsilon=epsilon, **params)

    def run(records: np.ndarray, seed: int) -> Any:
        return simulate(registry.make(name, kernel, epsilon=epsilon, **params), records,
                        rng=seed)

    return ReleaseCase(f"{name}[{label}]", run, data[0], data[1], protocol.released_fields,
                       protocol.public_coin_fields, protocol)


GRID = np.linspace(0.0, 1.0, 17)
GINI = gini_kernel((0.0, 1.0))
DOMAIN6 = list(range(6))


def protocol_cases() -> list[ReleaseCase]:
    """At least one case for every registered protocol (checked by the test)."""
    auc = auc_kernel()
    return [
        _protocol_case("auc", "central-laplace", auc, labelled()),
        _protocol_case("gini", "central-laplace", GINI, unit_values()),
        # Renyi-2's -ln U is released through a StatisticMap (the noisy U and its law).
        _protocol_case("renyi2", "central-laplace", renyi2_entropy_kernel(), categories()),
        _protocol_case("auc", "exact", auc, labelled(), epsilon=math.inf),
        _protocol_case("gini", "ldp-quantized", GINI, unit_values(), k=8),
        _protocol_case("auc", "ldp-quantized", auc, labelled(), k=8, bounds=(0.0, 1.0)),
        _protocol_case("kendall", "ldp-quantized", kendall_tau_kernel("a"), pairs_xy(), k=4,
                       bounds={"x": (0.0, 1.0), "y": (0.0, 1.0)}),
        _protocol_case("duplicate", "ldp-quantized", duplicate_pair_kernel(), categories(),
                       domain=DOMAIN6),
        _protocol_case("renyi2", "ldp-quantized", renyi2_entropy_kernel(), categories(),
                       domain=DOMAIN6),
        _protocol_case("gini", "ldp-ghazi", GINI, unit_values(), k=8),
        _protocol_case("gini", "ghazi-shuffle", GINI, unit_values(), k=8),
        _protocol_case("auc", "ldp-tree", auc, integer_scores(), d=16, oracle="hadamard"),
        # The default per-level oracles: at eps = 1 and 120 parties the recursion stops at
        # the root, whose children's estimates then sum to the report counts.
        _protocol_case("auc-auto", "ldp-tree", auc, integer_scores(), epsilon=4.0, d=16),
        _protocol_case("kendall", "pairs-2pc", kendall_tau_kernel("a"), pairs_xy(n=40), P=2),
        _protocol_case("auc", "pairs-2pc", auc, labelled(n=40), P=2),
        _protocol_case("gini", "umpc", GINI, unit_values(n=40)),
        _protocol_case("auc", "umpc", auc, labelled(n=40)),
        _protocol_case("rr", "fedauc-rr", auc, flipped_label(), n_clients=12),
        _protocol_case("local", "fedauc-laplace-local", auc, flipped_label(), n_clients=12),
        _protocol_case("alias", "fedauc-laplace", auc, flipped_label(), n_clients=12),
        _protocol_case("global", "fedauc-laplace-global", auc, flipped_label(), n_clients=12),
        _protocol_case("gaussian", "fedauc-gaussian", auc, flipped_label(), n_clients=12,
                       delta=1e-5),
        _protocol_case("adaptive", "fedauc-adaptive", auc, flipped_label(), n_clients=12),
    ]


def _function_case(name: str, function: Callable[[np.ndarray, int], Any],
                   data: tuple[np.ndarray, np.ndarray]) -> ReleaseCase:
    sample = function(data[0], 0)
    if isinstance(sample, Estimate):  # a public function running a registered protocol
        protocol = registry.make(sample.protocol, auc_kernel(), epsilon=EPSILON)
        # The public functions clip the release into the statistic's range (post-
        # processing) and keep the protocol's value as `unclipped`.
        return ReleaseCase(name, function, data[0], data[1],
                           (*protocol.released_fields, "unclipped"),
                           protocol.public_coin_fields)
    return ReleaseCase(name, function, data[0], data[1], type(sample).released_fields)


def _roc(records: np.ndarray, seed: int) -> Any:
    return dp_roc_curve(records[:, 1], records[:, 0], epsilon=EPSILON, thresholds=GRID, rng=seed)


def _hosmer_lemeshow(records: np.ndarray, seed: int) -> Any:
    return dp_hosmer_lemeshow(records[:, 1], records[:, 0], epsilon=EPSILON, Q=4, rng=seed)


def function_cases() -> list[ReleaseCase]:
    """Every release function outside the registry (curves and their post-processing)."""
    x = unit_values()
    return [
        _function_case("dp_ecdf", lambda r, s: dp_ecdf(r[:, 0], GRID, epsilon=EPSILON, rng=s),
                       x),
        _function_case("dp_ecdf-003-tree",
                       lambda r, s: dp_ecdf(r[:, 0], GRID, epsilon=EPSILON, rng=s,
                                            method="003-tree"), x),
        _function_case("dp_prefix_sums",
                       lambda r, s: dp_prefix_sums(r[:, 0], epsilon=EPSILON, rng=s), x),
        _function_case("dp_quantile",
                       lambda r, s: dp_quantile(dp_ecdf(r[:, 0], GRID, epsilon=EPSILON, rng=s),
                                                np.linspace(0.1, 0.9, 9)), unit_values(n=30)),
        _function_case("smooth", lambda r, s: smooth(dp_ecdf(r[:, 0], GRID, epsilon=EPSILON,
                                                             rng=s, method="003-tree")), x),
        _function_case("isotonic_projection",
                       lambda r, s: isotonic_projection(dp_ecdf(r[:, 0], GRID, epsilon=EPSILON,
                                                                rng=s)), x),
        _function_case("dp_roc_curve", _roc, labelled()),
        _function_case("dp_hosmer_lemeshow", _hosmer_lemeshow, labelled()),
        _function_case("pointwise_ecdf",
                       lambda r, s: pointwise_ecdf(r[:, 0], GRID, epsilon=EPSILON, rng=s), x),
        _function_case("fss_ecdf",
                       lambda r, s: fss_ecdf(r[:, 0], GRID, epsilon=EPSILON, rng=s), x),
        ReleaseCase("fedustat.ecdf", lambda r, s: fedustat.ecdf(r[:, 0], epsilon=EPSILON,
                                                                thresholds=GRID, rng=s),
                    *x, fedustat.curves.ECDFResult.released_fields),
        ReleaseCase("fedustat.quantile",
                    lambda r, s: fedustat.quantile(r[:, 0], [0.25, 0.75], epsilon=EPSILON,
                                                   thresholds=GRID, rng=s),
                    *unit_values(n=30), fedustat.curves.QuantilesResult.released_fields),
        ReleaseCase("fedustat.median",
                    lambda r, s: fedustat.median(r[:, 0], epsilon=EPSILON, thresholds=GRID,
                                                 method="curve", rng=s),
                    *unit_values(n=30), fedustat.curves.QuantileEstimate.released_fields),
        ReleaseCase("fedustat.roc_curve",
                    lambda r, s: fedustat.roc_curve(r[:, 1], r[:, 0], epsilon=EPSILON,
                                                    thresholds=GRID, rng=s),
                    *labelled(), fedustat.curves.ROCCurveResult.released_fields),
        ReleaseCase("fedustat.hosmer_lemeshow",
                    lambda r, s: fedustat.hosmer_lemeshow(r[:, 1], r[:, 0], epsilon=EPSILON,
                                                          n_groups=4, rng=s),
                    *labelled(), fedustat.curves.HosmerLemeshowResult.released_fields),
        ReleaseCase("fedustat.cumsum",
                    lambda r, s: fedustat.cumsum(r[:, 0], epsilon=EPSILON, rng=s),
                    *x, fedustat.curves.CumsumResult.released_fields),
        _function_case("roc_auc_score",
                       lambda r, s: fedustat.roc_auc_score(r[:, 1], r[:, 0], epsilon=EPSILON,
                                                           rng=s), labelled()),
    ]


def ecdf_protocol_cases() -> list[ReleaseCase]:
    """The federated ECDF evaluations run as protocols through the simulator."""
    cases = []
    for cls in (PointwiseECDF, FssECDF):
        def run(records: np.ndarray, seed: int, cls: type = cls) -> Any:
            return simulate(cls(GRID, epsilon=EPSILON), records, rng=seed)
        cases.append(ReleaseCase(cls.name, run, *unit_values(), cls.released_fields,
                                 cls.public_coin_fields))
    return cases


def all_cases() -> list[ReleaseCase]:
    return protocol_cases() + ecdf_protocol_cases() + function_cases()
