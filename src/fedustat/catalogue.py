"""The statistics fedustat computes, in one list that every entry point draws from.

Each :class:`Statistic` says what it is (a U-statistic of a kernel, or a curve release of
paper 003), its columns in order, the bundled data set it runs on by default (for
``fedustat estimate``, and the larger real table of ``fedustat compare``) with the
public description of those columns, and which protocols serve it. ``fedustat
estimate``, ``advise``, ``compare``, ``protocols`` and :func:`fedustat.estimate` read it,
so a statistic added here is offered everywhere.

Which U-statistic protocol serves which statistic is not listed by hand: a registered
protocol serves a statistic when its factory accepts the statistic's kernel with the
public description of its default columns (:func:`protocol_refusal` keeps the refusal,
e.g. "computes the AUC only"). The curve statistics are served by the curve releases
below: the central releases of :mod:`fedustat.protocols.ecdf` (:data:`CURVE_RELEASES`)
and the federated ones of the registry's curve registry (``ecdf-secagg``, ``ecdf-fss``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols import registry
from fedustat.stats import kernels
from fedustat.stats.kernels import Kernel

__all__ = [
    "CURVE_RELEASES",
    "PUBLIC_BOUNDS",
    "PUBLIC_VALUES",
    "STATISTICS",
    "CurveRelease",
    "Statistic",
    "curve_release",
    "get",
    "is_curve_protocol",
    "names",
    "protocol_refusal",
    "protocols_for",
    "public_description",
    "statistics_served",
]

# Public knowledge about bundled columns, never derived from the data: bounds of
# continuous columns (physically plausible ranges, or ranges fixed by how the column is
# built) and the value lists of discrete ones.
PUBLIC_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "breast_cancer_scores": {"score": (0.0, 1.0)},
    "diabetes_pairs": {"bmi": (10.0, 60.0), "progression": (0.0, 400.0),
                       "age": (0.0, 100.0)},
    "digits_images": {"ink": (0.0, 1024.0), "ink_top": (0.0, 512.0),
                      "ink_bottom": (0.0, 512.0)},
    "digits_scores": {"score": (0.0, 1.0)},
    "wine_cultivars": {"alcohol": (0.0, 20.0), "magnesium": (0.0, 200.0)},
}
PUBLIC_VALUES: dict[str, dict[str, list[float]]] = {
    "breast_cancer_scores": {"label": [0.0, 1.0]},
    "diabetes_pairs": {"progression_class": [0.0, 1.0, 2.0], "sex": [1.0, 2.0]},
    "digits_images": {"digit": [float(v) for v in range(10)]},
    "digits_scores": {"label": [0.0, 1.0]},
    "wine_cultivars": {"cultivar": [0.0, 1.0, 2.0]},
}


@dataclass(frozen=True)
class Statistic:
    """One statistic: what it is, its columns, its default data and public description.

    ``make_kernel`` builds the kernel of a U-statistic from public bounds (None for the
    kernels that need none); a curve statistic has ``curve`` instead, the kind of release
    (``"ecdf"``, ``"quantile"``, ``"median"``, ``"roc"``, ``"hl"``). ``columns`` are the
    kernel's (or the curve's) columns in order; ``data``/``data_columns`` the bundled demo
    set of ``fedustat estimate``, ``study_data``/``study_columns`` the larger real table
    ``fedustat compare`` measures on. ``labelled``: the last column is a public label.

    Parameters
    ----------
    name, description:
        The name every entry point accepts, and what it computes.
    columns:
        The kernel's (or curve's) columns, in order.
    data, data_columns:
        The bundled data set ``fedustat estimate`` runs on by default, and its columns.
    study_data, study_columns:
        The larger real table ``fedustat compare`` measures on, and its columns.
    make_kernel:
        Builds the U-statistic's kernel from public bounds; None for a curve statistic.
    curve:
        The kind of curve release; None for a U-statistic.
    needs_bounds:
        The kernel needs public bounds of the values (gini, variance).
    labelled:
        The last column is a public label.

    Examples
    --------
    >>> from fedustat import catalogue
    >>> gini = catalogue.get("gini")
    >>> gini.kind, gini.columns, gini.needs_bounds
    ('u-statistic', ('x',), True)
    """

    name: str
    description: str
    columns: tuple[str, ...]
    data: str
    data_columns: tuple[str, ...]
    study_data: str
    study_columns: tuple[str, ...]
    make_kernel: Callable[[tuple[float, float] | None], Kernel] | None = None
    curve: str | None = None
    needs_bounds: bool = False
    labelled: bool = False

    @property
    def kind(self) -> str:
        """``"u-statistic"`` or ``"curve"``.

        Examples
        --------
        >>> from fedustat import catalogue
        >>> catalogue.get("kendall").kind, catalogue.get("median").kind
        ('u-statistic', 'curve')
        """
        return "curve" if self.curve is not None else "u-statistic"

    @property
    def default_bounds(self) -> tuple[float, float] | None:
        """Public bounds of the default data's value column (for gini, variance and the
        curves' grids), or None.

        Examples
        --------
        >>> from fedustat import catalogue
        >>> catalogue.get("gini").default_bounds
        (10.0, 60.0)
        """
        bounds, _ = public_description(self, self.data, self.data_columns)
        return bounds.get(self.value_column)

    @property
    def value_column(self) -> str:
        """The column whose public bounds fix a kernel's sensitivity or a curve's grid.

        Examples
        --------
        >>> from fedustat import catalogue
        >>> catalogue.get("auc").value_column
        'score'
        """
        return self.columns[0]

    def kernel(self, bounds: tuple[float, float] | None = None) -> Kernel:
        """The statistic's kernel.

        Parameters
        ----------
        bounds:
            Public bounds ``(lo, hi)`` of the values, for gini and variance.

        Returns
        -------
        Kernel

        Examples
        --------
        >>> from fedustat import catalogue
        >>> catalogue.get("gini").kernel((0.0, 1.0)).name
        'gini_mean_difference'
        """
        if self.make_kernel is None:
            raise ValueError(f"{self.name} is a curve release, not a U-statistic: it has no "
                             "kernel")
        if self.needs_bounds and bounds is None:
            raise ValueError(f"{self.name} needs public bounds=(lo, hi) of the values (they "
                             "fix the sensitivity; taking them from the data would leak it)")
        return self.make_kernel(bounds)


def _no_bounds(factory: Callable[[], Kernel]) -> Callable[[tuple[float, float] | None], Kernel]:
    return lambda _bounds: factory()


def _with_bounds(factory: Callable[[tuple[float, float]], Kernel]
                 ) -> Callable[[tuple[float, float] | None], Kernel]:
    def make(bounds: tuple[float, float] | None) -> Kernel:
        assert bounds is not None  # Statistic.kernel checks it first
        return factory(bounds)
    return make


_CURVE_DATA = ("diabetes_pairs", ("bmi",), "digits_images", ("ink",))
_ROC_DATA = ("breast_cancer_scores", ("score", "label"), "digits_scores", ("score", "label"))

#: Every statistic, by name, in the order the command line lists them (U-statistics first:
#: ``fedustat estimate --statistic all`` runs those).
STATISTICS: dict[str, Statistic] = {s.name: s for s in [
    Statistic("auc", "area under the ROC curve of a score for a binary label (labels and "
              "class sizes public)", ("score", "label"),
              *_ROC_DATA, make_kernel=_no_bounds(kernels.auc_kernel), labelled=True),
    Statistic("mann-whitney", "Mann-Whitney U of a score between the two classes of a "
              "binary label (labels and class sizes public)", ("score", "label"),
              *_ROC_DATA, make_kernel=_no_bounds(kernels.mann_whitney_kernel), labelled=True),
    Statistic("kendall", "Kendall's tau-a between two variables", ("x", "y"),
              "diabetes_pairs", ("bmi", "progression"), "diabetes_pairs",
              ("bmi", "progression"),
              make_kernel=_no_bounds(lambda: kernels.kendall_tau_kernel("a"))),
    Statistic("kendall-b", "Kendall's tau-b between two variables (exact only: its tie "
              "correction reads the private tie counts)", ("x", "y"),
              "diabetes_pairs", ("bmi", "progression"), "diabetes_pairs",
              ("bmi", "progression"),
              make_kernel=_no_bounds(lambda: kernels.kendall_tau_kernel("b"))),
    Statistic("gini", "Gini mean difference of a bounded variable (needs public bounds)",
              ("x",), "diabetes_pairs", ("bmi",), "digits_images", ("ink",),
              make_kernel=_with_bounds(kernels.gini_kernel), needs_bounds=True),
    Statistic("variance", "sample variance of a bounded variable (needs public bounds)",
              ("x",), "diabetes_pairs", ("bmi",), "digits_images", ("ink",),
              make_kernel=_with_bounds(kernels.variance_kernel), needs_bounds=True),
    Statistic("duplicate", "duplicate-pair ratio of a categorical variable", ("x",),
              "wine_cultivars", ("cultivar",), "digits_images", ("digit",),
              make_kernel=_no_bounds(kernels.duplicate_pair_kernel)),
    Statistic("renyi2", "Rényi-2 (collision) entropy of a categorical variable", ("x",),
              "wine_cultivars", ("cultivar",), "digits_images", ("digit",),
              make_kernel=_no_bounds(kernels.renyi2_entropy_kernel)),
    Statistic("rand", "Rand index of two clusterings (two category codes) of the same "
              "records", ("a", "b"), "diabetes_pairs", ("sex", "progression_class"),
              "diabetes_pairs", ("sex", "progression_class"),
              make_kernel=_no_bounds(kernels.rand_index_kernel)),
    Statistic("vus", "volume under the ROC surface of a score for 3 ordered classes "
              "(classes public)", ("score", "class"), "diabetes_pairs",
              ("bmi", "progression_class"), "diabetes_pairs", ("bmi", "progression_class"),
              make_kernel=_no_bounds(kernels.vus_kernel), labelled=True),
    Statistic("ecdf", "empirical CDF on a public grid of thresholds", ("x",), *_CURVE_DATA,
              curve="ecdf"),
    Statistic("quantile", "quantiles (levels 0.1, 0.25, 0.5, 0.75, 0.9 by default) from "
              "the data on a public grid", ("x",), *_CURVE_DATA, curve="quantile"),
    Statistic("median", "the median on a public grid", ("x",), *_CURVE_DATA,
              curve="median"),
    Statistic("roc", "ROC curve of a score for a binary label, from two private class "
              "ECDFs", ("score", "label"), *_ROC_DATA, curve="roc", labelled=True),
    Statistic("hl", "Hosmer-Lemeshow calibration statistic of predicted probabilities for "
              "a binary label", ("score", "label"), *_ROC_DATA, curve="hl", labelled=True),
]}


def names(kind: str | None = None) -> list[str]:
    """Statistic names, all or of one kind.

    Parameters
    ----------
    kind:
        ``"u-statistic"``, ``"curve"`` or None (every statistic).

    Returns
    -------
    list of str
        Names in the catalogue's order.

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.names("curve")
    ['ecdf', 'quantile', 'median', 'roc', 'hl']
    """
    return [s.name for s in STATISTICS.values() if kind is None or s.kind == kind]


def get(name: str) -> Statistic:
    """The statistic called ``name``.

    Parameters
    ----------
    name:
        A key of :data:`STATISTICS`; an unknown name is refused with the list.

    Returns
    -------
    Statistic

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.get("kendall").columns, catalogue.get("roc").kind
    (('x', 'y'), 'curve')
    """
    try:
        return STATISTICS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown statistic {name!r}; known statistics: "
                         f"{', '.join(STATISTICS)}") from None


def public_description(statistic: Statistic, data: str, columns: tuple[str, ...] | list[str]
                       ) -> tuple[dict[str, tuple[float, float]], dict[str, list[float]]]:
    """Declared bounds and value lists of a bundled data set's columns.

    Parameters
    ----------
    statistic:
        The statistic whose column names key the answer.
    data, columns:
        A bundled data set and its columns, in the statistic's order.

    Returns
    -------
    tuple of dict
        ``({column: (lo, hi)}, {column: [values]})`` from :data:`PUBLIC_BOUNDS` and
        :data:`PUBLIC_VALUES` (never from the data).

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.public_description(catalogue.get("vus"), "diabetes_pairs",
    ...                              ("bmi", "progression_class"))
    ({'score': (10.0, 60.0)}, {'class': [0.0, 1.0, 2.0]})
    """
    bounds: dict[str, tuple[float, float]] = {}
    values: dict[str, list[float]] = {}
    for mine, theirs in zip(statistic.columns, columns, strict=False):
        if theirs in PUBLIC_BOUNDS.get(data, {}):
            bounds[mine] = PUBLIC_BOUNDS[data][theirs]
        if theirs in PUBLIC_VALUES.get(data, {}):
            values[mine] = list(PUBLIC_VALUES[data][theirs])
    return bounds, values


# ------------------------------------------------------------------ curve releases


@dataclass(frozen=True)
class CurveRelease:
    """A central curve release of :mod:`fedustat.protocols.ecdf` (a function, not a
    registry protocol): its name, privacy model, summary, source and statistics.

    Parameters
    ----------
    name:
        The release's name (the advisor's, and the ``protocol`` field of its results).
    model:
        Its privacy model (central: a trusted curator adds the noise).
    summary, source:
        What it does, and the paper section or work it implements.
    statistics:
        The catalogue statistics it releases.

    Examples
    --------
    >>> from fedustat import catalogue
    >>> release = catalogue.CURVE_RELEASES["dp-roc"]
    >>> release.model.value, release.statistics
    ('central', ('roc',))
    """

    name: str
    model: PrivacyModel
    summary: str
    source: str
    statistics: tuple[str, ...]


#: The central curve releases (a trusted curator adds the noise), by name. The names are
#: the advisor's and the releases' own ``protocol`` fields.
CURVE_RELEASES: dict[str, CurveRelease] = {r.name: r for r in [
    CurveRelease("dp-ecdf", PrivacyModel.CENTRAL,
                 "ECDF on a public grid: b-ary hierarchical histogram tree with least "
                 "squares (dp_ecdf)", "003 Sec. 3; Hay et al. 2010 Sec. 4",
                 ("ecdf", "quantile", "median")),
    CurveRelease("dp-ecdf-smoothed", PrivacyModel.CENTRAL,
                 "003's tree ECDF, smoothed into a monotone curve (dp_ecdf, smooth)",
                 "003 Sec. 3.1, Eq. 2-3", ("ecdf", "quantile", "median")),
    CurveRelease("dp-quantiles", PrivacyModel.CENTRAL,
                 "quantiles chosen among grid points: permute-and-flip, JointExp or the "
                 "inverted curve (dp_quantiles)",
                 "McKenna & Sheldon 2020; Gillenwater et al. 2021; 003 Alg. 1",
                 ("quantile", "median")),
    CurveRelease("dp-roc", PrivacyModel.CENTRAL,
                 "ROC curve from two class ECDFs at eps/2 each, isotonic fit (dp_roc_curve)",
                 "003 Sec. 5.1", ("roc",)),
    CurveRelease("dp-roc-smoothed", PrivacyModel.CENTRAL,
                 "ROC curve from 003's tree class ECDFs, smoothed (dp_roc_curve)",
                 "003 Sec. 5.1, Eq. 3", ("roc",)),
    CurveRelease("dp-ecdf-hl", PrivacyModel.CENTRAL,
                 "Hosmer-Lemeshow statistic: private cut points from the predictions' "
                 "ECDF, noisy group sums (dp_hosmer_lemeshow)",
                 "003 Sec. 5.2, Alg. 2, Thm 2", ("hl",)),
]}

#: Statistics the federated curve releases of the registry serve: the ECDF at grid points,
#: and the quantiles read from it (003 Sec. 4.3, post-processing).
FEDERATED_CURVE_STATISTICS = ("ecdf", "quantile", "median")

#: The release a curve statistic gets when no protocol is named.
DEFAULT_CURVE_RELEASE: dict[str, str] = {
    "ecdf": "dp-ecdf", "quantile": "dp-quantiles", "median": "dp-quantiles",
    "roc": "dp-roc", "hl": "dp-ecdf-hl"}

#: The epsilon of a command-line release or prediction when --epsilon is not given (every
#: subcommand that takes --epsilon uses it; the Python functions take epsilon= explicitly,
#: as scikit-learn-style calls name their budget).
DEFAULT_EPSILON = 1.0


def curve_release(name: str) -> CurveRelease | None:
    """The central curve release ``name``, or None.

    Parameters
    ----------
    name:
        A protocol name.

    Returns
    -------
    CurveRelease or None

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.curve_release("dp-roc").statistics, catalogue.curve_release("umpc")
    (('roc',), None)
    """
    return CURVE_RELEASES.get(name)


def is_curve_protocol(name: str) -> bool:
    """Whether ``name`` releases curves: a central curve release or a registry curve.

    Parameters
    ----------
    name:
        A protocol name.

    Returns
    -------
    bool

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.is_curve_protocol("ecdf-secagg"), catalogue.is_curve_protocol("umpc")
    (True, False)
    """
    return name in CURVE_RELEASES or registry.is_curve(name)


# ------------------------------------------------------------------ who serves what


def _curve_protocol_refusal(statistic: Statistic, protocol: str) -> str | None:
    if protocol in CURVE_RELEASES:
        served = CURVE_RELEASES[protocol].statistics
    elif registry.is_curve(protocol):
        served = FEDERATED_CURVE_STATISTICS
    else:
        return (f"{protocol} computes U-statistics of a kernel; {statistic.name} is a curve "
                f"release (its protocols: {', '.join(_curve_protocols(statistic.name))})")
    if statistic.name in served:
        return None
    return (f"{protocol} releases {', '.join(served)}, not {statistic.name} (its "
            f"protocols: {', '.join(_curve_protocols(statistic.name))})")


def _curve_protocols(statistic: str) -> list[str]:
    central = [r.name for r in CURVE_RELEASES.values() if statistic in r.statistics]
    federated = ([e.name for e in registry.available_curves()]
                 if statistic in FEDERATED_CURVE_STATISTICS else [])
    return central + federated


@cache
def _kernel_refusal(statistic: str, protocol: str) -> str | None:
    stat = STATISTICS[statistic]
    kernel = stat.kernel(stat.default_bounds)
    bounds, values = public_description(stat, stat.data, stat.data_columns)
    accepted = registry.parameters(protocol)
    params: dict[str, Any] = {}
    private = {c: b for c, b in bounds.items() if not stat.needs_bounds}
    if private and "bounds" in accepted:
        params["bounds"] = private
    domain = {c: v for c, v in values.items() if not (stat.labelled and c == stat.columns[-1])}
    if domain and "domain" in accepted:
        params["domain"] = domain
    refusal = ""
    # A protocol of an (eps, delta) mechanism is tried with a delta as well.
    for delta in (0.0, 1e-6):
        try:
            registry.make(protocol, kernel, epsilon=1.0, delta=delta, **params)
        except (TypeError, ValueError, OverflowError) as exc:
            refusal = refusal or str(exc).splitlines()[0]
            continue
        return None
    return refusal


def protocol_refusal(statistic: str, protocol: str) -> str | None:
    """Why ``protocol`` cannot compute ``statistic`` (None when it can).

    A U-statistic protocol is asked by building it for the statistic's kernel with the
    public description of the default columns; its own refusal is returned. Unknown
    names are refused naming what is known.

    Parameters
    ----------
    statistic:
        A name of :data:`STATISTICS`.
    protocol:
        Any protocol name.

    Returns
    -------
    str or None
        The reason, or None.

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.protocol_refusal("kendall", "umpc") is None
    True
    >>> catalogue.protocol_refusal("vus", "ldp-quantized")[:27]
    "kernel 'vus' has degree 3; "
    """
    stat = get(statistic)
    known_u = {e.name for e in registry.available()}
    if protocol not in known_u and not is_curve_protocol(protocol):
        known = sorted(known_u | set(CURVE_RELEASES)
                       | {e.name for e in registry.available_curves()})
        return f"unknown protocol {protocol!r}; available protocols: {', '.join(known)}"
    if stat.kind == "curve" or is_curve_protocol(protocol):
        if stat.kind == "u-statistic":
            return (f"{protocol} releases curves ({_served_curves(protocol)}); "
                    f"{statistic} is a U-statistic: use a U-statistic protocol such as "
                    "central-laplace")
        return _curve_protocol_refusal(stat, protocol)
    return _kernel_refusal(statistic, protocol)


def _served_curves(protocol: str) -> str:
    if protocol in CURVE_RELEASES:
        return ", ".join(CURVE_RELEASES[protocol].statistics)
    return ", ".join(FEDERATED_CURVE_STATISTICS)


def protocols_for(statistic: str) -> list[str]:
    """Every protocol (U-statistic, federated curve, central curve) that serves
    ``statistic``.

    Parameters
    ----------
    statistic:
        A name of :data:`STATISTICS`.

    Returns
    -------
    list of str

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.protocols_for("roc")
    ['dp-roc', 'dp-roc-smoothed']
    """
    stat = get(statistic)
    if stat.kind == "curve":
        return _curve_protocols(statistic)
    return [e.name for e in registry.available() if _kernel_refusal(statistic, e.name) is None]


def statistics_served(protocol: str) -> list[str]:
    """The statistics ``protocol`` computes (the inverse of :func:`protocols_for`).

    Parameters
    ----------
    protocol:
        Any protocol name.

    Returns
    -------
    list of str
        In the catalogue's order; empty for an unknown name.

    Examples
    --------
    >>> from fedustat import catalogue
    >>> catalogue.statistics_served("ecdf-fss")
    ['ecdf', 'quantile', 'median']
    """
    return [s for s in STATISTICS if protocol_refusal(s, protocol) is None]
