"""The public entry points, shaped like the scikit-learn / SciPy functions users know.

``estimate`` is the general one: a kernel, the parties' records, a protocol and a budget.
``roc_auc_score``, ``kendalltau``, ``gini_mean_difference``, ``duplicate_pair_ratio`` and
``rand_score`` wrap it for the common statistics. All return an
:class:`~fedustat.protocols.base.Estimate`; ``epsilon=math.inf`` (with the default
protocol) gives the exact, non-private value. Without ``rng`` every private value is drawn
from the operating system's CSPRNG through fixed-work samplers (deployment noise); a seed
asks for a reproducible simulation study; the release records which (``Estimate.noise``).
``engine=`` runs the same protocol with its batches of parties as tasks on a Dask cluster
(docs/engine.md).

Every release is post-processed into its statistic's valid range (:func:`statistic_range`:
AUC, probabilities and ratios in [0, 1], tau in [-1, 1], Gini mean difference and
variance >= 0) unless ``clip=False``; the unclipped release stays available as
``Estimate.raw_value`` / ``Estimate.raw_interval`` (docs/user-guide.md, "Using a release").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from fedustat import catalogue
from fedustat._inputs import (
    NO_PRIVATE_MEANING,
    accepts_random_state,
    binary_score,
    binary_target,
    column_inputs,
    noise_source,
)

# Names kept where they always were (fedustat.api.*): the command line and tests read them.
from fedustat._one_call import (  # noqa: F401
    DEFAULT_PROTOCOL,
    NOISE_CHOICES,
    PARTITION_ROWS,
    _check_budget,
    _distributed,
    _in_range,
    _partition_sizes,
    _protocol_for,
    _release,
    _spend,
    statistic_range,
)
from fedustat._validation import (
    RandomLike,
    as_rng,
    check_bounds_pair,
    check_budget,
    check_consistent_length,
    check_delta,
    check_epsilon,
)
from fedustat.cost import Cost
from fedustat.curve_dispatch import release_curve
from fedustat.curves import default_grid_points
from fedustat.kendall import KendallTauResult, kendall_tau_pvalue, kendalltau
from fedustat.privacy.budget import BudgetAccountant
from fedustat.privacy.errors import (
    error_sum,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols.base import Estimate
from fedustat.stats import kernels
from fedustat.stats.kernels import Kernel


@accepts_random_state
def estimate(kernel: Kernel | str, data: Any = None, *, epsilon: float, delta: float = 0.0,
             protocol: str | None = None, rng: RandomLike = None,
             noise: str | NoiseSource | None = None,
             batch_size: int | Sequence[int] | None = None, engine: Any = None,
             workers: int | None = None, partitions: Any = None,
             budget: BudgetAccountant | None = None, clip: bool = True,
             **params: Any) -> Any:
    """Estimate the U-statistic of ``kernel`` over ``data`` with a private protocol.

    Parameters
    ----------
    kernel:
        A :class:`~fedustat.stats.kernels.Kernel` (e.g. ``fedustat.stats.auc_kernel()``),
        or the name of a statistic of :mod:`fedustat.catalogue` (``"kendall"``; gini and
        variance take their public ``bounds=(lo, hi)``). A curve statistic (``"ecdf"``,
        ``"quantile"``, ``"median"``, ``"roc"``, ``"hl"``) is released by its curve
        release (``protocol``: ``"dp-ecdf"``, ``"ecdf-secagg"``, ...; default
        ``fedustat.catalogue.DEFAULT_CURVE_RELEASE``) on the public grid
        ``thresholds=[...]`` (or ``bounds=(lo, hi)``: 256 even points; for ``"quantile"``
        and ``"median"`` the bounds themselves, as in :func:`fedustat.quantile`), with
        ``levels=[...]`` for quantiles; it returns that release's own result (e.g. the
        ``ECDFResult`` of :func:`fedustat.ecdf`), see
        :func:`fedustat.curve_dispatch.release_curve`.
    data:
        One row per party, columns as ``kernel.columns`` (build it with ``kernel.pack``),
        or a pandas/polars DataFrame with columns of these names (other columns ignored).
        For a curve statistic: its columns (``fedustat.catalogue.get(name).columns``) as
        an array of one column per row entry, or a DataFrame with those column names.
    epsilon, delta:
        The privacy budget. ``epsilon=math.inf`` runs the protocol without noise where it
        allows it, or use ``protocol="exact"``.
    protocol:
        A registered protocol name; ``fedustat.protocols.registry.available()`` lists them
        (``fedustat protocols`` lists the curve releases too). Default: central-laplace.
    rng:
        A seed or Generator (or ``random_state=``, scikit-learn's name for it, which takes a
        legacy RandomState too) asks for a reproducible study (simulation noise: the same seed
        gives the same estimate; the release says it is a study, not a protection).
        None (default): deployment noise, as for a release about real people.
    noise:
        None (default): deployment noise without ``rng``, simulation noise with it.
        ``"deployment"``: the operating system's CSPRNG for shares, masks and keys,
        fixed-work samplers for the noise (refuses a seed). ``"simulation"``: seeded NumPy
        draws, fast and reproducible, not fit to protect people (fresh entropy without
        ``rng``). A :class:`~fedustat.privacy.noise.NoiseSource` is used as given. The
        release's ``noise`` attribute, and its printed form, say which one was used.
    batch_size:
        Parties per simulated batch, or the sizes of the batches. In process the result
        does not depend on it; on the engine, in-memory data are split in these slices
        (one task each).
    engine:
        ``None`` (default): in this process. ``"local"``: a Dask ``LocalCluster`` started
        for this call (``workers`` processes, default 2) and closed after it; a scheduler
        address ``"tcp://host:port"``: that cluster; or a
        :class:`~fedustat.runtime.engine.DaskEngine` / ``distributed.Client`` you already
        have (left open). Needs the ``engine`` extra (``pip install '.[engine]'`` in the
        checkout). Protocols whose server step the engine cannot split (see
        docs/engine.md) are refused with the reason.
        With the same seed and the same split, the release equals the in-process one with
        ``batch_size=[partition sizes]``; ``diagnostics["engine"]`` says where it ran and
        on how many partitions. In-memory ``data`` are sliced and shipped to the workers,
        so the whole array then sits on the driver too: for data that should not, use
        ``partitions``.
    workers:
        Worker processes of ``engine="local"``.
    partitions:
        Instead of ``data``, with an engine: a Parquet file or a directory of ``*.parquet``
        files (one partition per file, in name order; columns named as
        ``kernel.columns``), or a list of :class:`~fedustat.runtime.engine.Partition`.
        Workers read them; the driver never holds the rows. Each record is checked by its
        own party's step (bounds, labels) as in process.
    clip:
        ``True`` (default): the value is clipped into the statistic's valid range
        (:func:`statistic_range`) and the interval intersected with it; the unclipped
        release stays in ``raw_value`` / ``raw_interval()``. ``False``: the raw release
        as the protocol made it (unbiased where the protocol is; for averaging releases).
    **params:
        Protocol-specific parameters (see the protocol's page in docs/protocols/); a name
        the protocol does not take is refused with the list of those it does.
    budget:
        A :class:`~fedustat.privacy.budget.BudgetAccountant` for this data set: the
        release is checked against it before any party runs (raising
        ``BudgetExceededError`` or ``IncomparableGuaranteeError``) and its guarantee is
        spent after. See docs/budget.md.

    Returns
    -------
    Estimate
        The release (for a curve statistic: the curve release's own result).

    Examples
    --------
    >>> import math
    >>> import numpy as np
    >>> import fedustat
    >>> data = np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 4.0], [4.0, 3.0]])
    >>> round(fedustat.estimate("kendall", data, epsilon=math.inf).value, 4)
    0.3333
    >>> curve = fedustat.estimate("ecdf", [1.0, 2.0, 2.0, 4.0], epsilon=math.inf,
    ...                           thresholds=[1.0, 2.0, 3.0, 4.0])
    >>> [float(v) for v in curve.values]
    [0.25, 0.75, 0.75, 1.0]
    """
    if isinstance(kernel, str):
        return _estimate_by_name(kernel, data, epsilon=epsilon, delta=delta,
                                 protocol=protocol, rng=rng, noise=noise,
                                 batch_size=batch_size, engine=engine, workers=workers,
                                 partitions=partitions, budget=budget, clip=clip,
                                 params=params)
    protocol = DEFAULT_PROTOCOL if protocol is None else protocol
    for key in params:
        if key in NO_PRIVATE_MEANING:
            raise TypeError(f"fedustat.estimate() does not take {key}=: "
                            f"{NO_PRIVATE_MEANING[key]}")
    data = _table_columns(kernel, data)
    _check_budget(budget, kernel, epsilon, delta, protocol, data=data, partitions=partitions,
                  params=params)
    release = _release(kernel, data, epsilon=epsilon, delta=delta, protocol=protocol,
                       rng=rng, noise=noise, batch_size=batch_size,
                       caller="fedustat.estimate", params=params, engine=engine,
                       workers=workers, partitions=partitions, clip=clip)
    if budget is not None:
        budget.after_release(release.privacy, name=f"{kernel.name} ({protocol})",
                             gaussian=protocol == "fedauc-gaussian")
    return release


def _estimate_by_name(name: str, data: Any, *, epsilon: float, delta: float,
                      protocol: str | None, rng: RandomLike, noise: Any, batch_size: Any,
                      engine: Any, workers: int | None, partitions: Any,
                      budget: BudgetAccountant | None, clip: bool,
                      params: dict[str, Any]) -> Any:
    """:func:`estimate` for a statistic named in :mod:`fedustat.catalogue`."""
    statistic = catalogue.get(name)
    if protocol is not None:
        refusal = catalogue.protocol_refusal(name, protocol)
        if refusal is not None:
            raise ValueError(f"fedustat.estimate({name!r}): {refusal}")
    if statistic.kind == "u-statistic":
        bounds = params.pop("bounds", None) if statistic.needs_bounds else None
        kernel = statistic.kernel(None if bounds is None else tuple(bounds))
        return estimate(kernel, data, epsilon=epsilon, delta=delta, protocol=protocol,
                        rng=rng, noise=noise, batch_size=batch_size, engine=engine,
                        workers=workers, partitions=partitions, budget=budget, clip=clip,
                        **params)
    given = {"delta": delta, "batch_size": batch_size, "engine": engine,
             "workers": workers, "partitions": partitions}
    unused = [key for key, value in given.items() if value]
    if unused or not clip:
        raise TypeError(f"fedustat.estimate({name!r}): {(unused or ['clip'])[0]}= is not an "
                        "argument of the curve releases (pure epsilon-DP, in this process)")
    thresholds = params.pop("thresholds", None)
    bounds = params.pop("bounds", None)
    levels = params.pop("levels", None)
    if params:
        raise TypeError(f"fedustat.estimate({name!r}) got an unexpected keyword argument "
                        f"{next(iter(params))!r}: curve releases take thresholds=, bounds=, "
                        "levels=")
    if statistic.curve == "hl":
        # Hosmer-Lemeshow's grid and groups are its own (003 Alg. 2): a grid given here
        # would be ignored.
        given = [key for key, value in (("thresholds", thresholds), ("bounds", bounds),
                                        ("levels", levels)) if value is not None]
        if given:
            raise TypeError(f"fedustat.estimate('hl'): {given[0]}= is not an argument of the "
                            "Hosmer-Lemeshow release: its grid of predicted probabilities is "
                            "fixed by 003 Alg. 2; set its spacing and groups with "
                            "fedustat.hosmer_lemeshow(..., gamma=, n_groups=)")
    curve_bounds = None
    if statistic.curve != "hl" and bounds is not None:
        if thresholds is not None:
            raise ValueError(f"fedustat.estimate({name!r}): pass bounds= or thresholds=, "
                             "not both")
        low, high = check_bounds_pair(bounds, "bounds")
        if name in ("quantile", "median"):
            # As fedustat.quantile: answers anywhere in the bounds (the continuous default).
            curve_bounds = (low, high)
        else:
            thresholds = np.linspace(low, high, default_grid_points(statistic.curve))
    return release_curve(name, _curve_columns(statistic, data), epsilon=epsilon,
                         protocol=protocol, thresholds=thresholds, levels=levels, rng=rng,
                         noise=noise_source(noise, rng), budget=budget,
                         **({"bounds": curve_bounds} if curve_bounds is not None else {}))


def _curve_columns(statistic: Any, data: Any) -> list[np.ndarray]:
    """A curve statistic's columns from a DataFrame (by name) or an array (by position)."""
    if data is None:
        raise ValueError(f"fedustat.estimate({statistic.name!r}) needs data: its columns "
                         f"{', '.join(statistic.columns)}")
    if hasattr(data, "columns") and not isinstance(data, np.ndarray):
        return [np.asarray(column_inputs("fedustat.estimate", {}, data, column=c)["column"])
                for c in statistic.columns]
    array = np.asarray(data)
    width = len(statistic.columns)
    if width == 1 and array.ndim == 1:
        return [array]
    if array.ndim != 2 or array.shape[1] != width:
        raise ValueError(f"fedustat.estimate({statistic.name!r}): data must have "
                         f"{width} column(s) ({', '.join(statistic.columns)}), got shape "
                         f"{array.shape}")
    return [array[:, j] for j in range(width)]


# ------------------------------------------------------------------ scikit-learn inputs

def _table_columns(kernel: Kernel, data: Any) -> Any:
    """A pandas/polars DataFrame as the array of ``kernel.columns`` (selected by name);
    anything else unchanged."""
    if data is None or isinstance(data, np.ndarray) or not hasattr(data, "columns"):
        return data
    names = [str(c) for c in data.columns]
    missing = [c for c in kernel.columns if c not in names]
    if missing:
        raise ValueError(f"fedustat.estimate(): data has no column {missing[0]!r}; kernel "
                         f"{kernel.name!r} reads the columns {', '.join(kernel.columns)} "
                         f"(data's columns: {', '.join(names)})")
    return np.column_stack([np.asarray(column_inputs("fedustat.estimate", {}, data,
                                                       column=c)["column"])
                            for c in kernel.columns])

def _check_labels(caller: str, name: str, labels: np.ndarray) -> None:
    """Cluster labels (numbers or strings; only their equality matters): one-dimensional,
    not empty, no NaN or infinite number."""
    if labels.ndim != 1:
        raise ValueError(f"{caller}(): {name} must be one-dimensional (one label per record), "
                         f"got shape {labels.shape}")
    if labels.size == 0:
        raise ValueError(f"{caller}(): {name} is empty; at least two records are needed")
    if labels.dtype.kind in "fc" and not np.all(np.isfinite(labels)):
        raise ValueError(f"{caller}(): {name} contains NaN or infinite labels")


def _codes(values: np.ndarray) -> np.ndarray:
    """Non-numeric labels (strings, objects) as integer codes: the Rand index reads only
    whether two labels are equal, which codes keep."""
    if values.dtype.kind in "biuf":
        return values
    try:
        return np.unique(values, return_inverse=True)[1].reshape(values.shape)
    except TypeError:  # unorderable mixed objects: code by first appearance
        index: dict[Any, int] = {}
        return np.array([index.setdefault(v, len(index)) for v in values.tolist()])



@accepts_random_state
def roc_auc_score(y_true: Any, y_score: Any, *, epsilon: float, delta: float = 0.0,
                  pos_label: Any = None, multi_class: str = "raise",
                  average: str | None = "macro", labels: Any = None, data: Any = None,
                  protocol: str | None = None, rng: RandomLike = None,
                  noise: str | NoiseSource | None = None,
                  engine: Any = None, workers: int | None = None, clip: bool = True,
                  budget: BudgetAccountant | None = None,
                  **params: Any) -> Estimate | list[Estimate]:
    """Private area under the ROC curve; mirrors ``sklearn.metrics.roc_auc_score``.

    ``engine``/``workers`` run it on the distributed engine, ``clip=False`` keeps the
    release unclipped and ``budget=`` checks the release before it runs and spends it
    after, as in :func:`estimate` (this holds for every one-call function below).

    Labels 0/1, -1/1 or booleans need no ``pos_label``; any others (strings, 1/2, ...)
    need ``pos_label=`` naming the positive class (scikit-learn's rule for
    ``roc_curve``); with more than two labels, ``pos_label`` against the rest.
    ``y_score`` is a 1-D score or a ``predict_proba`` array with one column per sorted
    label: its positive class's column is used (column 1 of an (n, 2) array for labels
    0/1, as in scikit-learn). Columns may be pandas/polars Series, or column names of
    the table ``data`` (``roc_auc_score("label", "score", data=df, epsilon=1)``).
    ``sample_weight`` and ``max_fpr`` are refused: they have no private meaning here.

    Multiclass labels with an (n, K) ``predict_proba`` array need
    ``multi_class="ovr"`` (each class against the rest) or ``"ovo"`` (every pair, Hand
    and Till), averaged with ``average="macro"`` or ``"weighted"`` (by prevalence), as in
    scikit-learn: each binary AUC is released with epsilon / m (m = K for ovr, K(K - 1)
    for ovo; basic composition) and the release is their average
    (``diagnostics["releases"]``, ``["epsilon_each"]``). With ``multi_class="ovr"``,
    ``average=None`` returns the list of the K per-class releases (scikit-learn's array;
    ``np.asarray(result, dtype=float)`` is it) and ``average="micro"`` one AUC of the
    flattened one-vs-rest indicator matrix (n K rows, released at epsilon / K: a
    record's K rows are covered by group privacy). ``labels=`` gives the classes in the
    order of ``y_score``'s columns; a listed class absent from ``y_true`` gets NaN
    (``average=None``) or weight 0 (``"weighted"``); ``"macro"`` refuses it, as its
    average would be NaN.

    Ties in ``y_score`` count one half, as in scikit-learn. The class sizes are treated
    as public, as in the papers (000 Sec. 4; 004 Sec. 3).

    Parameters
    ----------
    y_true:
        Class labels, one per party (a column name of ``data`` also works).
    y_score:
        Scores, higher meaning more likely positive: 1-D, or a ``predict_proba`` array.
    epsilon, delta:
        The privacy budget; ``epsilon=math.inf`` gives the exact AUC.
    pos_label:
        The positive class, when the labels are not 0/1, -1/1 or booleans.
    multi_class, average:
        For more than two classes: ``"ovr"`` or ``"ovo"``, averaged ``"macro"`` or
        ``"weighted"``; for ``"ovr"`` also ``None`` (one release per class) or
        ``"micro"``.
    labels:
        The classes, in the order of ``y_score``'s columns (default: y_true's sorted).
    data:
        A pandas/polars table whose columns ``y_true`` and ``y_score`` name.
    protocol:
        A registered protocol name (None: ``"exact"`` for ``epsilon=math.inf``, else
        ``"central-laplace"``).
    rng, noise:
        Seed or Generator for the simulation (``random_state=`` is the same argument,
        scikit-learn's name), and where the randomness comes from
        (``"simulation"`` or ``"deployment"``), as in :func:`estimate`.
    engine, workers:
        Run on the distributed engine, as in :func:`estimate`.
    clip:
        Clip the release into the statistic's valid range (the raw release stays in
        ``raw_value``), as in :func:`estimate`.
    **params:
        Protocol-specific parameters (docs/protocols/).

    Returns
    -------
    Estimate or list of Estimate
        The released AUC with its guarantee, error law and measured cost (with
        ``multi_class="ovr", average=None``: the list of the per-class releases).

    Examples
    --------
    >>> y = [0, 0, 1, 1, 0, 1]
    >>> s = [0.1, 0.4, 0.35, 0.8, 0.2, 0.9]
    >>> round(fedustat.roc_auc_score(y, s, epsilon=math.inf).value, 4)
    0.8889
    >>> est = fedustat.roc_auc_score(y, s, epsilon=1.0, rng=0)
    >>> est.protocol, est.privacy.epsilon
    ('central-laplace', 1.0)
    """
    caller = "fedustat.roc_auc_score"
    cols = column_inputs(caller, params, data, y_true=y_true, y_score=y_score)
    if multi_class not in ("raise", "ovr", "ovo"):
        raise ValueError(f"{caller}(): multi_class must be 'raise', 'ovr' or 'ovo', got "
                         f"{multi_class!r}")
    n_labels = len(np.unique(cols["y_true"])) if cols["y_true"].ndim == 1 else 0
    classes = None if labels is None else _class_list(caller, labels, cols["y_true"])
    n_classes = n_labels if classes is None else len(classes)
    if cols["y_score"].ndim == 2 and cols["y_score"].shape[1] > 2 and n_classes > 2:
        if multi_class == "raise":
            raise ValueError(f"{caller}(): y_true has {n_classes} classes and y_score "
                             f"{cols['y_score'].shape[1]} columns: pass multi_class='ovr' "
                             "(one class against the rest) or 'ovo' (every pair of classes)")
        if pos_label is not None:
            raise ValueError(f"{caller}(): pos_label is for binary labels; with "
                             f"multi_class={multi_class!r} every class is positive in turn")
        name = _protocol_for(epsilon, protocol)
        _check_budget(budget, kernels.auc_kernel(), epsilon, delta, name, single=False,
                      data=cols["y_true"], params=params)
        result = _multiclass_auc(
            cols["y_true"], cols["y_score"], multi_class=multi_class, average=average,
            classes=classes, caller=caller, epsilon=epsilon, delta=delta, protocol=name,
            rng=rng, noise=noise, params=params, engine=engine, workers=workers, clip=clip)
        if isinstance(result, list):  # average=None: one charge for the composed releases
            if budget is not None:
                released = next(r for r in result if r.privacy.model is not PrivacyModel.NONE
                                or r.protocol == "exact")
                privacy = replace(released.privacy, epsilon=check_epsilon(
                    epsilon, allow_inf=True), delta=check_delta(delta))
                budget.after_release(privacy, name=f"auc (ovr, None) ({name})")
            return result
        return _spend(budget, result, name, single=False)
    if average not in ("macro", "weighted", "micro", None):  # scikit-learn's values
        raise ValueError(f"{caller}(): average must be 'macro', 'weighted', 'micro' or None, "
                         f"got {average!r} (a binary AUC is one number whichever is given)")
    targets, column = binary_target(cols["y_true"], pos_label, caller)
    score = binary_score(cols["y_score"], column, len(np.unique(cols["y_true"])), caller)
    kernel = kernels.auc_kernel()
    name = _protocol_for(epsilon, protocol)
    _check_budget(budget, kernel, epsilon, delta, name, data=targets, params=params)
    return _spend(budget, _release(kernel, kernel.pack(score, targets), epsilon=epsilon,
                                   delta=delta, protocol=name, rng=rng, noise=noise,
                                   batch_size=None, caller=caller, params=params,
                                   engine=engine, workers=workers, clip=clip), name)


def _class_list(caller: str, labels: Any, y_true: np.ndarray) -> np.ndarray:
    """``labels=``: the classes, in the order of ``y_score``'s columns (scikit-learn's
    ``labels``); every label of ``y_true`` must be among them, and a listed class may be
    absent from ``y_true``."""
    classes = np.asarray(labels)
    if classes.ndim != 1 or classes.size < 2:
        raise ValueError(f"{caller}(): labels must list at least two classes, got {labels!r}")
    if len(np.unique(classes)) != classes.size:
        raise ValueError(f"{caller}(): labels must not repeat a class, got {labels!r}")
    unknown = [v for v in np.unique(y_true).tolist() if v not in classes.tolist()]
    if unknown:
        raise ValueError(f"{caller}(): y_true holds {unknown[0]!r}, which is not in labels "
                         f"{classes.tolist()}; list every class")
    return classes


def _nothing_released(quantity: str, protocol: str, why: str) -> Estimate:
    """A NaN answer that releases nothing (an AUC undefined by public class counts)."""
    return Estimate(value=math.nan, quantity=quantity, protocol=protocol,
                    privacy=PrivacyGuarantee(math.inf, 0.0, PrivacyModel.NONE,
                                             "nothing released"),
                    std_error=math.nan, noise="none", diagnostics={"note": why})


def _multiclass_auc(y_true: np.ndarray, y_score: np.ndarray, *, multi_class: str,
                    average: str | None, classes: np.ndarray | None, caller: str,
                    epsilon: float, delta: float, protocol: str, rng: RandomLike,
                    noise: Any, params: dict[str, Any], engine: Any, workers: int | None,
                    clip: bool) -> Estimate | list[Estimate]:
    """Multiclass AUC as scikit-learn defines it, from private binary AUC releases.

    ``ovr``: the AUC of each class against the rest, with its own column of ``y_score``;
    ``ovo``: for every pair of classes (a, b), the mean of AUC(a | b) on column a and
    AUC(b | a) on column b over the records of a and b (Hand and Till 2001, Machine
    Learning 45, 171-186, eq. 7). ``average="macro"`` is their mean, ``"weighted"``
    weights them by prevalence (class sizes are public here, as in 000 Sec. 4), ``None``
    (ovr) returns each class's release. Each AUC is a U-statistic released with
    epsilon / m and delta / m, m the number of released AUCs, so by basic composition
    (Dwork and Roth 2014, Thm. 3.16) the whole release is (epsilon, delta)-DP; the
    average of the raw releases is post-processing. ``"micro"`` (ovr) is one AUC of the
    flattened one-vs-rest problem, see :func:`_micro_auc`.
    """
    if multi_class == "ovo" and average not in ("macro", "weighted"):
        raise ValueError(f"{caller}(): average must be 'macro' or 'weighted' with "
                         f"multi_class='ovo', got {average!r} (None and 'micro' are "
                         "one-vs-rest averages, as in scikit-learn)")
    if average not in ("macro", "weighted", "micro", None):
        raise ValueError(f"{caller}(): average must be 'macro', 'weighted', 'micro' or None "
                         f"with multi_class='ovr', got {average!r}")
    classes = np.unique(y_true) if classes is None else classes
    k = len(classes)
    if y_score.shape[1] != k:
        raise ValueError(f"{caller}(): y_score has {y_score.shape[1]} columns but there are "
                         f"{k} classes; one column per class (in sorted order, or in the "
                         "order of labels=) is needed")
    present = np.array([bool(np.any(y_true == c)) for c in classes])
    absent = [c for c, here in zip(classes.tolist(), present, strict=True) if not here]
    if absent and (multi_class == "ovo" or average == "macro"):
        raise ValueError(f"{caller}(): class {absent[0]!r} of labels does not occur in y_true, "
                         f"so its AUC is undefined and the {multi_class} {average} average "
                         "would be NaN (scikit-learn returns nan): use average='weighted' "
                         "(weight 0), None (NaN for that class) or 'micro'")
    if average == "micro":
        return _micro_auc(y_true, y_score, classes, caller=caller, epsilon=epsilon,
                          delta=delta, protocol=protocol, rng=rng, noise=noise,
                          params=params, engine=engine, workers=workers, clip=clip)
    tasks: list[tuple[np.ndarray, int, float]] = []  # (records' mask, positive, weight)
    if multi_class == "ovr":
        for i in range(k):
            if present[i]:
                tasks.append((np.ones(len(y_true), dtype=bool), i,
                              float(np.mean(y_true == classes[i]))))
    else:
        n_pairs = k * (k - 1) // 2
        for i in range(k):
            for j in range(i + 1, k):
                mask = (y_true == classes[i]) | (y_true == classes[j])
                prevalence = float(np.mean(mask))
                tasks += [(mask, i, prevalence / 2.0), (mask, j, prevalence / 2.0)]
        if average == "macro":
            tasks = [(m, c, 0.5 / n_pairs) for m, c, _ in tasks]
    if average == "macro" and multi_class == "ovr":
        tasks = [(m, c, 1.0 / k) for m, c, _ in tasks]
    total = sum(w for _, _, w in tasks)
    weights = [w / total for _, _, w in tasks]
    share = len(tasks)
    eps = check_budget(epsilon, allow_inf=True)
    dlt = check_delta(delta)
    stream = None if rng is None else as_rng(rng)  # one stream, drawn in turn
    kernel = kernels.auc_kernel()
    parts = []
    for mask, positive, _ in tasks:
        labels = (y_true[mask] == classes[positive]).astype(np.int8)
        parts.append(_release(kernel, kernel.pack(y_score[mask, positive], labels),
                              epsilon=eps / share, delta=dlt / share,
                              protocol=protocol, rng=stream, noise=noise, batch_size=None,
                              caller=caller, params=params, engine=engine,
                              workers=workers, clip=False))
    if average is None:
        # scikit-learn's array of per-class AUCs: here each class's own release (at
        # epsilon / m: together (epsilon, delta)-DP), NaN for a listed class not in y_true.
        released = iter(parts)
        out = []
        for c, here in zip(classes.tolist(), present, strict=True):
            if not here:
                out.append(_nothing_released(f"auc ({c!r} vs rest)", protocol,
                                             f"class {c!r} does not occur in y_true"))
                continue
            part = next(released)
            out.append(_in_range(replace(part, quantity=f"auc ({c!r} vs rest)",
                                         diagnostics={**part.diagnostics,
                                                      "epsilon_total": eps,
                                                      "releases": share}), kernel, clip))
        return out
    raw = float(sum(w * p.raw_value for w, p in zip(weights, parts, strict=True)))
    errors = [p.error for p in parts]
    error = (error_sum([e.scaled(w) for w, e in zip(weights, errors, strict=True)])
             if all(e is not None for e in errors) else None)
    ses = [p.std_error for p in parts]
    std_error = (math.sqrt(sum((w * se) ** 2 for w, se in zip(weights, ses, strict=True)))
                 if all(se is not None for se in ses) else None)
    n = len(y_true)
    # A party's totals over the releases; one outside a release (ovo) sends nothing there.
    sizes = [int(mask.sum()) for mask, _, _ in tasks]
    cost = Cost(**{f.name: sum(getattr(p.cost, f.name) * (size / n if "per_party" in f.name
                                                          and not f.name.startswith("max")
                                                          else 1)
                               for p, size in zip(parts, sizes, strict=True))
                   for f in dataclasses.fields(Cost)})
    first = parts[0]
    privacy = replace(first.privacy, epsilon=eps, delta=dlt)
    release = replace(first, value=raw, quantity=f"auc ({multi_class}, {average})",
                      privacy=privacy, std_error=std_error, error=error, cost=cost,
                      diagnostics={"multi_class": multi_class, "average": average,
                                   "releases": len(tasks), "weights": weights,
                                   "epsilon_each": eps / share,
                                   "components": [p.raw_value for p in parts]},
                      clip_range=None, unclipped=None)
    return _in_range(release, kernel, clip)


def _micro_auc(y_true: np.ndarray, y_score: np.ndarray, classes: np.ndarray, *, caller: str,
               epsilon: float, delta: float, protocol: str, rng: RandomLike, noise: Any,
               params: dict[str, Any], engine: Any, workers: int | None,
               clip: bool) -> Estimate:
    """scikit-learn's ``average="micro"``: one AUC of the flattened one-vs-rest problem.

    The n x K indicator matrix of ``y_true`` against ``classes`` and ``y_score`` are
    flattened into n K (score, label) rows (n positives, n (K - 1) negatives) and their
    AUC released. The labels stay public, as for every AUC here. One person's record is
    K of these rows, so the protocol runs at epsilon / K and delta / (K e^((K-1) epsilon
    / K)): by group privacy (Dwork and Roth 2014, Sec. 2.3; Vadhan 2017, Lemma 2.2) a
    change of one person's K rows is then (epsilon, delta)-DP. (For the central Laplace
    release the group's effect on the AUC is (2n - 1) / n^2 against 1 / n for one row,
    so the factor K is conservative there.)
    """
    k = len(classes)
    indicator = (y_true[:, None] == classes[None, :]).astype(np.int8)
    eps = check_budget(epsilon, allow_inf=True)
    dlt = check_delta(delta)
    delta_each = dlt / (k * math.exp((k - 1) * eps / k)) if dlt > 0 else 0.0
    kernel = kernels.auc_kernel()
    part = _release(kernel, kernel.pack(y_score.ravel(), indicator.ravel()),
                    epsilon=eps / k, delta=delta_each, protocol=protocol, rng=rng,
                    noise=noise, batch_size=None, caller=caller, params=params,
                    engine=engine, workers=workers, clip=False)
    # The relation stays the AUC's (budgets compare it); the rows are in the diagnostics.
    privacy = replace(part.privacy, epsilon=eps, delta=dlt)
    release = replace(part, quantity="auc (ovr, micro)", privacy=privacy,
                      diagnostics={**part.diagnostics, "average": "micro", "rows": k,
                                   "epsilon_each_row": eps / k,
                                   "composition": "group privacy over a record's rows"})
    return _in_range(release, kernel, clip)



@accepts_random_state
def gini_mean_difference(x: Any, *, bounds: tuple[float, float], epsilon: float,
                         delta: float = 0.0, data: Any = None, protocol: str | None = None,
                         rng: RandomLike = None,
                         noise: str | NoiseSource | None = None, engine: Any = None,
                         workers: int | None = None, clip: bool = True,
                         budget: BudgetAccountant | None = None,
                         **params: Any) -> Estimate:
    """Private Gini mean difference (000 eq. 4) of values within the public ``bounds``.

    ``x`` may be a pandas/polars Series or a column name of ``data``.

    Parameters
    ----------
    x:
        The values, one per party (a column name of ``data`` also works).
    bounds:
        Public ``(low, high)`` range of the values (it sets the sensitivity).
    epsilon, delta:
        The privacy budget; ``epsilon=math.inf`` gives the exact statistic.
    data:
        A pandas/polars table whose column ``x`` names.
    protocol:
        A registered protocol name (None: ``"exact"`` for ``epsilon=math.inf``, else
        ``"central-laplace"``).
    rng, noise:
        Seed or Generator for the simulation (``random_state=`` is the same argument,
        scikit-learn's name), and where the randomness comes from
        (``"simulation"`` or ``"deployment"``), as in :func:`estimate`.
    engine, workers:
        Run on the distributed engine, as in :func:`estimate`.
    clip:
        Clip the release into the statistic's valid range (the raw release stays in
        ``raw_value``), as in :func:`estimate`.
    **params:
        Protocol-specific parameters (docs/protocols/).

    Returns
    -------
    Estimate
        The released mean of ``|x_i - x_j|`` over pairs.

    Examples
    --------
    >>> fedustat.gini_mean_difference([1.0, 2.0, 2.0, 5.0], bounds=(0, 10),
    ...                               epsilon=math.inf).value
    2.0
    """
    caller = "fedustat.gini_mean_difference"
    cols = column_inputs(caller, params, data, x=x)
    kernel = kernels.gini_kernel(bounds)
    name = _protocol_for(epsilon, protocol)
    _check_budget(budget, kernel, epsilon, delta, name, data=cols["x"], params=params)
    return _spend(budget, _release(kernel, kernel.pack(cols["x"]), epsilon=epsilon,
                                   delta=delta, protocol=name, rng=rng, noise=noise,
                                   batch_size=None, caller=caller, params=params,
                                   engine=engine, workers=workers, clip=clip), name)


@accepts_random_state
def duplicate_pair_ratio(x: Any, *, epsilon: float, delta: float = 0.0,
                         data: Any = None, protocol: str | None = None, rng: RandomLike = None,
                         noise: str | NoiseSource | None = None, engine: Any = None,
                         workers: int | None = None, clip: bool = True,
                         budget: BudgetAccountant | None = None,
                         **params: Any) -> Estimate:
    """Private fraction of pairs with equal values (000 eq. 5, inside the logarithm).

    ``x`` may be a pandas/polars Series or a column name of ``data``.

    Parameters
    ----------
    x:
        The values, one per party (a column name of ``data`` also works).
    epsilon, delta:
        The privacy budget; ``epsilon=math.inf`` gives the exact statistic.
    data:
        A pandas/polars table whose column ``x`` names.
    protocol:
        A registered protocol name (None: ``"exact"`` for ``epsilon=math.inf``, else
        ``"central-laplace"``).
    rng, noise:
        Seed or Generator for the simulation (``random_state=`` is the same argument,
        scikit-learn's name), and where the randomness comes from
        (``"simulation"`` or ``"deployment"``), as in :func:`estimate`.
    engine, workers:
        Run on the distributed engine, as in :func:`estimate`.
    clip:
        Clip the release into the statistic's valid range (the raw release stays in
        ``raw_value``), as in :func:`estimate`.
    **params:
        Protocol-specific parameters (docs/protocols/).

    Returns
    -------
    Estimate
        The released fraction of pairs ``i < j`` with ``x_i == x_j``.

    Examples
    --------
    >>> round(fedustat.duplicate_pair_ratio([1, 2, 2, 3, 3, 3], epsilon=math.inf).value, 4)
    0.2667
    """
    caller = "fedustat.duplicate_pair_ratio"
    cols = column_inputs(caller, params, data, x=x)
    kernel = kernels.duplicate_pair_kernel()
    name = _protocol_for(epsilon, protocol)
    _check_budget(budget, kernel, epsilon, delta, name, data=cols["x"], params=params)
    return _spend(budget, _release(kernel, kernel.pack(cols["x"]), epsilon=epsilon,
                                   delta=delta, protocol=name, rng=rng, noise=noise,
                                   batch_size=None, caller=caller, params=params,
                                   engine=engine, workers=workers, clip=clip), name)


@accepts_random_state
def rand_score(labels_true: Any, labels_pred: Any, *, epsilon: float, delta: float = 0.0,
               data: Any = None, protocol: str | None = None, rng: RandomLike = None,
               noise: str | NoiseSource | None = None, engine: Any = None,
               workers: int | None = None, clip: bool = True,
               budget: BudgetAccountant | None = None,
               **params: Any) -> Estimate:
    """Private Rand index; mirrors ``sklearn.metrics.rand_score``.

    Labels may be numbers or strings (only their equality matters); columns may be
    pandas/polars Series or column names of ``data``, as in :func:`roc_auc_score`.

    Parameters
    ----------
    labels_true, labels_pred:
        Two clusterings of the same records (column names of ``data`` also work).
    epsilon, delta:
        The privacy budget; ``epsilon=math.inf`` gives the exact index.
    data:
        A pandas/polars table whose columns the labels name.
    protocol:
        A registered protocol name (None: ``"exact"`` for ``epsilon=math.inf``, else
        ``"central-laplace"``).
    rng, noise:
        Seed or Generator for the simulation (``random_state=`` is the same argument,
        scikit-learn's name), and where the randomness comes from
        (``"simulation"`` or ``"deployment"``), as in :func:`estimate`.
    engine, workers:
        Run on the distributed engine, as in :func:`estimate`.
    clip:
        Clip the release into the statistic's valid range (the raw release stays in
        ``raw_value``), as in :func:`estimate`.
    **params:
        Protocol-specific parameters (docs/protocols/).

    Returns
    -------
    Estimate
        The released fraction of pairs on which the two clusterings agree.

    Examples
    --------
    >>> round(fedustat.rand_score([0, 0, 1, 1], [0, 0, 1, 2], epsilon=math.inf).value, 4)
    0.8333
    """
    caller = "fedustat.rand_score"
    cols = column_inputs(caller, params, data, labels_true=labels_true,
                           labels_pred=labels_pred)
    for key, labels in cols.items():
        _check_labels(caller, key, labels)
    check_consistent_length(labels_true=cols["labels_true"], labels_pred=cols["labels_pred"])
    kernel = kernels.rand_index_kernel()
    name = _protocol_for(epsilon, protocol)
    records = kernel.pack(_codes(cols["labels_true"]), _codes(cols["labels_pred"]))
    _check_budget(budget, kernel, epsilon, delta, name, data=records, params=params)
    return _spend(budget, _release(kernel, records, epsilon=epsilon, delta=delta,
                                   protocol=name, rng=rng, noise=noise, batch_size=None,
                                   caller=caller, params=params, engine=engine,
                                   workers=workers, clip=clip), name)


# statistic_range is reached as fedustat.api.statistic_range; Kendall's tau lives in
# fedustat.kendall and is re-exported here.
__all__ = ["KendallTauResult", "duplicate_pair_ratio", "estimate", "gini_mean_difference",
           "kendall_tau_pvalue", "kendalltau",
           "rand_score", "roc_auc_score"]
