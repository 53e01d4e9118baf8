"""Reading columns of a CSV or Parquet file into NumPy arrays.

CSV is read with the standard library (no pandas); Parquet through pyarrow, an optional
dependency (the ``parquet`` extra: ``pip install '.[parquet]'`` in the checkout) imported
only when a Parquet file is read.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["read_table"]

_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet"}


def read_table(path: str | os.PathLike[str], columns: Sequence[str] | None = None, *,
               categorical: Sequence[str] = (), file_format: str | None = None,
               delimiter: str | None = None) -> dict[str, np.ndarray]:
    """Read columns of a CSV, TSV or Parquet file.

    Parameters
    ----------
    path : str or path-like
        The file. Its suffix picks the format (``.csv``; ``.tsv``/``.tab``;
        ``.parquet``/``.pq``) unless ``file_format`` is given.
    columns : sequence of str, optional
        Columns to return, in this order. Default: every column, in file order.
    categorical : sequence of str, default ()
        Columns returned as text (a NumPy unicode array) instead of numbers, e.g. a
        category label such as a job title; every other returned column must be numeric.
    file_format : {"csv", "tsv", "parquet"}, optional
        Overrides the suffix.
    delimiter : str, optional
        CSV field separator; default ``","`` for CSV and a tab for TSV.

    Returns
    -------
    dict of str to numpy.ndarray
        One-dimensional arrays of equal length: float64 for numeric columns (integers
        beyond 2^53 lose precision), unicode strings for ``categorical`` ones.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If a requested column is missing (the message names the file and lists its
        columns); if a numeric column holds a non-numeric or missing value (the message
        names the file, the column, the line and the value); if the CSV has no header or
        no data rows, duplicate column names or a row of the wrong width.
    ImportError
        If a Parquet file is read and pyarrow is not installed.

    Examples
    --------
    >>> data = read_table("scores.csv", columns=["score", "label"])  # doctest: +SKIP
    >>> data["score"].dtype  # doctest: +SKIP
    dtype('float64')
    """
    file = Path(os.fspath(path))
    if columns is not None:
        if isinstance(columns, str):
            raise TypeError(f"columns must be a list of column names, not the string "
                            f"{columns!r}; write columns=[{columns!r}]")
        columns = list(columns)
        if len(set(columns)) != len(columns):
            raise ValueError(f"columns lists a name more than once: {columns}")
    if isinstance(categorical, str):
        raise TypeError(f"categorical must be a list of column names, not the string "
                        f"{categorical!r}; write categorical=[{categorical!r}]")
    text_columns = set(categorical)
    fmt = _resolve_format(file, file_format)
    if not file.is_file():
        raise FileNotFoundError(f"no such file: {file}")
    if fmt == "parquet":
        return _read_parquet(file, columns, text_columns)
    sep = delimiter if delimiter is not None else ("\t" if fmt == "tsv" else ",")
    return _read_csv(file, columns, text_columns, sep)


def _resolve_format(file: Path, file_format: str | None) -> str:
    if file_format is not None:
        fmt = str(file_format).lower()
        if fmt not in {"csv", "tsv", "parquet"}:
            raise ValueError(f"file_format must be 'csv', 'tsv' or 'parquet', got {file_format!r}")
        return fmt
    try:
        return _FORMATS[file.suffix.lower()]
    except KeyError:
        raise ValueError(f"cannot tell the format of {file} from its suffix {file.suffix!r}; "
                         f"use one of {sorted(_FORMATS)} or pass file_format='csv', 'tsv' "
                         "or 'parquet'") from None


def _check_requested(file: Path, header: list[str], columns: list[str] | None,
                     text_columns: set[str]) -> list[str]:
    wanted = header if columns is None else columns
    missing = [c for c in wanted if c not in header]
    if missing:
        raise ValueError(f"{file}: no column(s) {missing}; the file has columns {header}")
    stray = sorted(text_columns - set(wanted))
    if stray:
        raise ValueError(f"{file}: categorical names column(s) {stray} that are not being read "
                       f"(the columns read are {wanted})")
    return wanted


def _read_csv(file: Path, columns: list[str] | None, text_columns: set[str],
              sep: str) -> dict[str, np.ndarray]:
    # utf-8-sig drops the byte-order mark that spreadsheet exports put before the header.
    with file.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, delimiter=sep)
        header: list[str] | None = None
        rows: list[list[str]] = []
        line_numbers: list[int] = []
        for record in reader:
            if not record or all(not cell.strip() for cell in record):
                continue  # blank lines carry no data
            if header is None:
                header = [cell.strip() for cell in record]
                continue
            if len(record) != len(header):
                raise ValueError(f"{file}, line {reader.line_num}: {len(record)} field(s) but "
                                 f"the header has {len(header)}; check the delimiter "
                                 f"({sep!r}) and quoting")
            rows.append(record)
            line_numbers.append(reader.line_num)
    if header is None:
        raise ValueError(f"{file} is empty; expected a header row naming the columns")
    if len(set(header)) != len(header):
        dupes = sorted({h for h in header if header.count(h) > 1})
        raise ValueError(f"{file}: the header names column(s) {dupes} more than once")
    wanted = _check_requested(file, header, columns, text_columns)
    if not rows:
        raise ValueError(f"{file} has a header but no data rows")
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        j = header.index(name)
        cells = np.array([row[j].strip() for row in rows], dtype=np.str_)
        if name in text_columns:
            out[name] = cells
        else:
            out[name] = _to_float(cells, file, name, line_numbers)
    return out


def _to_float(cells: np.ndarray, file: Path, name: str, line_numbers: list[int]) -> np.ndarray:
    """Vectorized parse; only on failure walk the cells to name the first bad one."""
    try:
        return cells.astype(np.float64)
    except ValueError:
        pass
    for k, cell in enumerate(cells.tolist()):
        try:
            float(cell)
        except ValueError:
            what = "a missing (empty) value" if cell == "" else f"the non-numeric value {cell!r}"
            raise ValueError(
                f"{file}, line {line_numbers[k]}, column {name!r}: {what}; numeric columns "
                "must hold numbers only (remove or impute such rows, or pass the column in "
                "categorical=[...] to read it as text)") from None
    # NumPy and Python disagree on some spelling (e.g. digit separators); Python decides.
    return np.array([float(cell) for cell in cells.tolist()], dtype=np.float64)


def _import_pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading Parquet files needs pyarrow; install it with "
                          "`pip install '.[parquet]'` in the fedustat checkout") from exc
    return pq


def _read_parquet(file: Path, columns: list[str] | None,
                  text_columns: set[str]) -> dict[str, np.ndarray]:
    pq = _import_pyarrow_parquet()
    import pyarrow as pa

    header = list(pq.read_schema(file).names)
    wanted = _check_requested(file, header, columns, text_columns)
    table = pq.read_table(file, columns=wanted)
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        col = table.column(name)
        if col.null_count:
            raise ValueError(f"{file}, column {name!r}: {col.null_count} missing (null) "
                             "value(s); remove or impute them before computing statistics")
        kind = col.type
        if name in text_columns:
            out[name] = np.asarray(col.to_pylist(), dtype=np.str_)
        elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            out[name] = np.asarray(col.to_numpy(), dtype=np.float64)
        elif pa.types.is_decimal(kind):
            out[name] = np.array([float(v) for v in col.to_pylist()], dtype=np.float64)
        else:
            raise ValueError(f"{file}, column {name!r}: type {kind} is not numeric; pass the "
                             "column in categorical=[...] to read it as text")
    return out
