"""Library messages as a command-line user reads them: Python keyword hints
(``bounds=(lo, hi)``) spelled as the flags that set them, each warning once, and "did you
mean" suggestions for misspelled names."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from fedustat.protocols import registry

#: Python keyword spellings in the library's messages, and the flags a CLI user types
#: instead. ``{column}`` is the column the message names (or COLUMN). Applied by
#: :func:`flag_hint` to every message that reaches the command line.
_FLAG_SPELLINGS: tuple[tuple[str, str], ...] = (
    # A column's bounds: per column when the message names one, else the single --bounds.
    (r"(?<![\w-])bounds=\((?:lo|low), ?(?:hi|high)\)", "{bounds}"),
    (r"(?<![\w-])domain=(?:\[\.\.\.\])?", "--column-values {column}=V1,V2,..."),
    (r"(?<![\w-])precision=(?!\w)", "--precision P"),
    (r"(?<![\w-])column_bounds\b", "--column-bounds"),
    (r"(?<![\w-])column_values\b", "--column-values"),
    (r"(?<![\w-])thresholds=(?!\w)", "--param thresholds=T1,T2,..."),
    # The curve releases' grid: "one of thresholds (...)", "the public grid: thresholds,".
    (r"(?<=one of )thresholds\b|(?<=grid: )thresholds\b", "--param thresholds=T1,T2,..."),
    (r"public score domain size d\b", "public score domain size d (--param d=D)"),
    # The advisor's keyword arguments (``fedustat advise``): the snake_case names are the
    # options' own, so they are rewritten wherever they stand alone.
    (r"(?<![\w-])n_pos(?![\w\[])", "--n-pos"),
    (r"(?<![\w-])n_neg(?![\w\[])", "--n-neg"),
    (r"(?<![\w-])domain_size(?![\w\[])", "--domain-size"),
    (r"(?<![\w-])max_bits_per_party(?![\w\[])", "--max-bits"),
    (r"(?<=error: )bounds (?=is required|names unknown|for \w+ must)", "--bounds "),
    (r"public \(lo, hi\)", "public LO,HI"),
)


def flag_hint(message: str) -> str:
    """A library message with its Python keyword hints spelled as command-line flags.

    The library speaks to Python callers (``bounds=(lo, hi)``, ``domain=[...]``); at the
    command line the same advice is ``--column-bounds x=LO,HI`` or ``--bounds LO,HI``,
    ``--column-values x=V1,V2,...``, ``--precision P``. One mapping here rather than
    CLI-specific wording inside the library.
    """
    named = (re.search(r"column '([^']+)'", message)
             or re.search(r"(\w+) has values that are not in the declared domain", message))
    column = named.group(1) if named else "COLUMN"
    bounds = f"--column-bounds {column}=LO,HI" if named else "--bounds LO,HI"
    for pattern, flag in _FLAG_SPELLINGS:
        replacement = flag.format(column=column, bounds=bounds)
        message = re.sub(pattern, lambda _m, r=replacement: r, message)
    return re.sub(r"(?<![\w-])(\w+)=('[^']*'|True|False|(?=[\s),;]|$))", _keyword_flag,
                  message)


#: Keyword arguments with an option of their own (``protocol='exact'`` is --protocol exact).
_OWN_OPTIONS = ("protocol", "noise", "engine")


def _keyword_flag(match: re.Match[str]) -> str:
    """``name='value'``, ``name=True`` or a bare ``name=`` as the option that sets it:
    its own option, or ``--param`` for a protocol parameter; anything else unchanged."""
    name, value = match.group(1), match.group(2)
    value = value.strip("'").lower() if value in ("True", "False") else value.strip("'")
    if name in _OWN_OPTIONS and value:
        return f"--{name} {value}"
    if name not in _protocol_parameter_names():
        return match.group(0)
    return f"--param {name}={value or name.upper()}"


def _protocol_parameter_names() -> frozenset[str]:
    """Every registered protocol's keyword parameters (given with ``--param``)."""
    names: set[str] = set()
    for entry in registry.available():
        names.update(registry.parameters(entry.name))
    return frozenset(names - {"bounds", "domain", "precision", "noise"})


def _warning_printer() -> Callable[..., None]:
    """A ``warnings.showwarning`` that prints each distinct warning once per command.

    Commands that run many repetitions (``compare``) enter ``warnings.catch_warnings``
    per run, which resets Python's own once-per-location bookkeeping; one line per
    distinct message is what the reader needs."""
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], filename: str,
             lineno: int, file: Any = None, line: str | None = None) -> None:
        text = f"warning: {flag_hint(str(message))}"
        if text not in shown:
            shown.add(text)
            print(text, file=sys.stderr)
    return show



def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'; did you mean 'X'?' naming the closest of ``choices`` to ``word`` (difflib), or ''
    when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
