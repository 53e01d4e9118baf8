"""What the one-call functions accept, checked at the boundary.

Columns by name from a table (pandas, polars, a dict of columns) or as arrays and
Series; scikit-learn's labels (``pos_label``) and scores (a ``predict_proba`` column);
the noise source a call asks for. :mod:`fedustat.api` (the U-statistics) and
:mod:`fedustat.curves` (the curve statistics) share them, so both read their inputs the
same way.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from fedustat._validation import RandomLike
from fedustat.privacy.noise import DeploymentNoise, NoiseSource, SimulationNoise

__all__ = ["NO_PRIVATE_MEANING", "accepts_random_state", "binary_score", "binary_target",
           "column_inputs", "noise_source", "rng_from_random_state"]

Function = TypeVar("Function", bound=Callable[..., Any])


def rng_from_random_state(random_state: Any, caller: str) -> RandomLike:
    """scikit-learn's ``random_state`` as this library's ``rng``.

    None stays None (deployment noise: the OS CSPRNG, where scikit-learn would use NumPy's
    global generator); an int seed, a ``numpy.random.Generator`` or a ``SeedSequence`` is
    an ``rng`` already. A legacy ``numpy.random.RandomState`` is simulation randomness like
    an int seed (a reproducible study, labelled so): a Generator is seeded from 128 bits
    drawn from it, so the same RandomState state gives the same release and the
    RandomState advances, as scikit-learn's estimators advance it.
    """
    if isinstance(random_state, np.random.RandomState):
        words = random_state.randint(0, 2**32, size=4, dtype=np.uint64)
        return np.random.default_rng(np.random.SeedSequence([int(w) for w in words]))
    if random_state is None or isinstance(random_state, (np.random.Generator,
                                                         np.random.SeedSequence)):
        return random_state
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return int(random_state)
    raise TypeError(f"{caller}(): random_state must be None, an int seed, a "
                    "numpy.random.Generator or a numpy.random.RandomState, got "
                    f"{type(random_state).__name__}")


def accepts_random_state(function: Function) -> Function:
    """``function`` (which takes ``rng=``) taking scikit-learn's ``random_state=`` too.

    ``random_state`` is converted by :func:`rng_from_random_state` and passed on as
    ``rng``; giving both is refused. The signature shows ``random_state`` after ``rng``.
    """
    signature = inspect.signature(function)
    if "rng" not in signature.parameters:
        raise TypeError(f"{function.__qualname__} takes no rng=, so no random_state=")
    caller = f"fedustat.{function.__name__}"

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "random_state" in kwargs:
            random_state = kwargs.pop("random_state")
            if "rng" in kwargs:
                raise TypeError(f"{caller}(): pass rng= or random_state= (scikit-learn's "
                                "name for the same argument), not both")
            kwargs["rng"] = rng_from_random_state(random_state, caller)
        return function(*args, **kwargs)

    parameters = list(signature.parameters.values())
    at = [p.name for p in parameters].index("rng") + 1
    parameters.insert(at, inspect.Parameter("random_state", inspect.Parameter.KEYWORD_ONLY,
                                            default=None, annotation="Any"))
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def noise_source(noise: Any, rng: RandomLike) -> NoiseSource | None:
    """The source of a call's private draws; None for a simulation seeded by ``rng``.

    No ``noise`` and no ``rng`` (the default): deployment noise, since the call may run on
    someone's records (the OS CSPRNG and the fixed-work samplers). A seed asks for a
    reproducible study (None: the protocol's steps draw from ``rng``'s streams).
    ``noise="simulation"`` without a seed is a study on fresh NumPy entropy.
    """
    if noise is None:
        return DeploymentNoise() if rng is None else None
    if isinstance(noise, str) and noise == "simulation":
        return SimulationNoise(np.random.default_rng()) if rng is None else None
    if isinstance(noise, NoiseSource):
        source = noise
    elif noise == "deployment":
        source = DeploymentNoise()
    else:
        raise ValueError(f"noise must be 'simulation' or 'deployment' (or a NoiseSource), "
                         f"got {noise!r}")
    if source.kind == "deployment" and rng is not None:
        raise ValueError("deployment noise cannot be seeded: pass rng=None with "
                         "noise='deployment' (a seed would make the release reproducible "
                         "by anyone who knows it)")
    return source


#: scikit-learn / SciPy arguments that have no private meaning here, with the reason given
#: when one is passed (rather than "unexpected keyword argument").
NO_PRIVATE_MEANING: dict[str, str] = {
    "sample_weight": "a weighted U-statistic has another sensitivity (one record's weight "
                     "moves it by more than the unweighted bound the noise is calibrated "
                     "to), so weights have no private meaning here",
    "max_fpr": "the standardized partial AUC up to max_fpr depends on the negatives' score "
               "quantile, which is private, so it is not a U-statistic of a public kernel "
               "and has no private release here",
}


def column_inputs(caller: str, params: dict[str, Any], data: Any,
                    **columns: Any) -> dict[str, np.ndarray]:
    """The columns of a one-call function as NumPy arrays, checked at the boundary.

    A column may be an array, a list, a pandas/polars Series (converted with
    ``np.asarray``), or a column name of the table ``data`` (a DataFrame or a dict of
    columns, as in seaborn's API).
    Arguments of scikit-learn without a private meaning (:data:`NO_PRIVATE_MEANING`)
    are refused here with the reason, before any party runs.
    """
    for key in params:
        if key in NO_PRIVATE_MEANING:
            raise TypeError(f"{caller}() does not take {key}=: {NO_PRIVATE_MEANING[key]}")
    out = {}
    for name, values in columns.items():
        if isinstance(values, str):
            if data is None:
                raise TypeError(f"{caller}(): {name}={values!r} is a column name; pass the "
                                "table too (data=df)")
            # a DataFrame's columns, or a dict's keys (a table as a mapping of columns)
            names = [str(c) for c in (data.keys() if isinstance(data, Mapping)
                                      else getattr(data, "columns", ()))]
            if values not in names:
                raise ValueError(f"{caller}(): data has no column {values!r} (its columns: "
                                 f"{', '.join(names) or 'none'})")
            values = data[values]
        elif data is not None and isinstance(values, (int, float)):
            raise TypeError(f"{caller}(): with data=, give {name} as a column name")
        to_numpy = getattr(values, "to_numpy", None)  # pandas and polars Series
        if callable(to_numpy) and not isinstance(values, np.ndarray):
            values = to_numpy()
        out[name] = np.asarray(values)
    return out


def binary_target(y_true: np.ndarray, pos_label: Any, caller: str) -> tuple[np.ndarray, int]:
    """``y_true`` as 0/1 (1 = ``pos_label``) and the positive class's index among the
    sorted labels (its ``predict_proba`` column).

    scikit-learn's rule (``sklearn.metrics.roc_curve``): labels {0, 1} or {-1, 1} need no
    ``pos_label`` (1 is positive); any other labels need it.
    """
    if y_true.ndim != 1:
        raise ValueError(f"{caller}(): y_true must be one-dimensional, got shape "
                         f"{y_true.shape}")
    if y_true.dtype.kind in "fc" and not np.all(np.isfinite(y_true)):
        raise ValueError(f"{caller}(): y_true contains NaN or infinite labels")
    try:
        classes = np.unique(y_true).tolist()
    except TypeError as exc:  # mixed types that do not sort
        raise ValueError(f"{caller}(): y_true mixes label types ({exc})") from exc
    numeric = y_true.dtype.kind in "biuf"
    shown = str([float(c) if numeric and y_true.dtype.kind != "b" else c
                 for c in classes[:5]])[:-1] + (", ...]" if len(classes) > 5 else "]")
    if pos_label is None:
        if not numeric or not (set(classes) <= {0, 1} or set(classes) <= {-1, 1}):
            raise ValueError(f"{caller}(): y_true's label must be binary (0/1, -1/1 or "
                             f"booleans); found values {shown}: for other labels, name the "
                             "positive class with pos_label="
                             + ("; for a multiclass AUC, give one y_score column per class "
                                "and multi_class='ovr' or 'ovo'" if len(classes) > 2 else ""))
        # 1 is positive; a single class is refused by the kernel ("no ... example")
        return (y_true == 1).astype(np.int8), 1
    if pos_label not in classes:
        raise ValueError(f"{caller}(): pos_label={pos_label!r} is not among y_true's "
                         f"labels {shown}")
    return (y_true == pos_label).astype(np.int8), classes.index(pos_label)


def binary_score(y_score: np.ndarray, column: int, n_classes: int, caller: str,
                 name: str = "y_score") -> np.ndarray:
    """A 1-D score, or the positive class's column of a ``predict_proba`` array (column 1
    of an (n, 2) array for labels 0/1, scikit-learn's binary convention); ``name`` is the
    caller's argument in messages."""
    if y_score.dtype.kind == "c":
        raise TypeError(f"{caller}(): {name} contains complex numbers; give real scores (a "
                        "complex value's imaginary part would be dropped)")
    if y_score.ndim == 2 and y_score.shape[1] == 1:
        return y_score[:, 0]
    if y_score.ndim == 2 and y_score.shape[1] == max(n_classes, 2):
        return y_score[:, column]
    if y_score.ndim != 1:
        raise ValueError(f"{caller}(): {name} has shape {y_score.shape}; expected a 1-D "
                         "score or an (n, 2) predict_proba array (column 1 = probability of "
                         f"the positive class) for the {n_classes} label(s) of y_true")
    return y_score
