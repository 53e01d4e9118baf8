"""Parsing of option values: LO,HI pairs, key=value protocol parameters, lists of
numbers, a file to read; each bad value ends in one ``error: ...`` line naming the option."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _parse_pair(text: str, what: str) -> tuple[float, float]:
    """Public bounds ``LO,HI``: two finite numbers with LO < HI."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"error: {what} must be two numbers separated by a comma, "
                         f"got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise SystemExit(f"error: {what} must be finite numbers, got {text!r}")
    if not lo < hi:
        raise SystemExit(f"error: {what} must satisfy LO < HI, got {text!r}")
    return lo, hi


def _parse_value(text: str) -> Any:
    """A ``--param`` value: an int, a float, true/false, none, else the string itself.

    The protocol's factory then checks the type (``registry.check_parameters``), so a
    string where a number is expected is refused with the parameter's name.
    """
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    words: dict[str, Any] = {"true": True, "false": False, "none": None}
    return words.get(text.strip().lower(), text)


def _parse_params(items: Sequence[str] | None) -> dict[str, Any]:
    """``key=value`` pairs for protocol parameters (see :func:`_parse_value`)."""
    params: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"error: --param must look like key=value, got {item!r}")
        key = key.strip()
        if key == "noise":
            raise SystemExit("error: choose the noise with --noise simulation|deployment, "
                             "not --param noise=...")
        if key in ("bounds", "precision"):
            raise SystemExit(f"error: give {key} with --{key}, not --param {key}=...")
        params[key] = _parse_value(text)
    return params


def _check_file(path: str) -> None:
    """A readable regular file, or a one-line error saying what is wrong with it."""
    where = Path(path)
    if where.is_dir():
        raise SystemExit(f"error: --file {path} is a directory; give a CSV or Parquet file")
    if where.exists() and not where.is_file():
        raise SystemExit(f"error: --file {path} is not a regular file")


def _parse_floats(text: str, what: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"error: {what} must be numbers separated by commas, got {text!r}"
                         ) from None
    if not values:
        raise SystemExit(f"error: {what} is empty")
    return values


def _parse_domain_size(text: str | None) -> int | list[int] | None:
    if text is None:
        return None
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"error: --domain-size must be an integer (or one per column, "
                         f"e.g. 6,6), got {text!r}") from None
    return sizes[0] if len(sizes) == 1 else sizes


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value



def parse_column_bounds(items: Sequence[str]) -> dict[str, tuple[float, float]]:
    """--column-bounds NAME=LO,HI (repeatable) as {NAME: (LO, HI)}."""
    bounds: dict[str, tuple[float, float]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"error: --column-bounds must look like COLUMN=LO,HI, got "
                             f"{item!r}")
        bounds[name.strip()] = _parse_pair(text, "--column-bounds")
    return bounds
