"""Where a distributed run's data come from: one partition per batch of parties.

A partition is a small, picklable description (a Parquet file, or a generator and its
index) that a worker turns into the batch's records; the driver never holds the rows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedustat._validation import as_float_array, as_seed_sequence, check_positive_int


def absolute_path(path: str | Path) -> str:
    """``path`` made absolute against this process's working directory (``~`` expanded),
    before it is shipped to workers that run in working directories of their own."""
    return str(Path(path).expanduser().resolve())


class Partition(ABC):
    """A batch of parties' records, loaded where the batch runs."""

    @abstractmethod
    def load(self) -> np.ndarray:
        """The records, shape (rows, columns)."""

    def n_rows_stored(self) -> int:
        """The number of rows, read cheaply where the storage says it."""
        return int(self.load().shape[0])


@dataclass(frozen=True)
class ParquetPartition(Partition):
    """One Parquet file (or a directory of files read as one table); ``columns`` in the
    order the protocol expects them (e.g. score, label).

    ``path`` is made absolute when the partition is made, against this process's working
    directory: the partition is read by a worker, and a worker of an external cluster
    runs in a working directory of its own, where a relative path names another file or
    none (pyarrow's "Failed to open local file"). On several machines the absolute path
    must name the same file on each (a shared file system).
    """

    path: str
    columns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", absolute_path(self.path))

    def load(self) -> np.ndarray:
        import pyarrow.parquet as pq  # the parquet extra; imported where the rows are read

        table = pq.read_table(self.path, columns=list(self.columns) if self.columns else None)
        cols = [np.asarray(table.column(i).to_numpy(), dtype=np.float64)
                for i in range(table.num_columns)]
        return as_float_array(np.column_stack(cols), f"partition {self.path}", ndim=2)

    def n_rows_stored(self) -> int:
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(self.path).metadata.num_rows)


@dataclass(frozen=True)
class GeneratedPartition(Partition):
    """Rows drawn by ``generator(n_rows, rng)`` with partition ``index``'s own stream
    (``SeedSequence(seed).spawn`` order), so the data of a partition do not depend on
    which worker draws them or on the other partitions."""

    generator: Callable[[int, np.random.Generator], Any]
    n_rows: int
    seed: int
    index: int

    def n_rows_stored(self) -> int:
        return self.n_rows

    def load(self) -> np.ndarray:
        root = np.random.SeedSequence(self.seed)
        # The index-th child of the seed, without spawning the ones before it.
        child = np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, self.index))
        rows = self.generator(self.n_rows, np.random.default_rng(child))
        arr = as_float_array(rows, f"partition {self.index}", ndim=(1, 2))
        return arr[:, None] if arr.ndim == 1 else arr


@dataclass(frozen=True, eq=False)
class ArrayPartition(Partition):
    """Rows already in memory, shipped to the worker that runs the batch (convenient for
    data that fit on the driver; for data that do not, use Parquet or a generator)."""

    rows: np.ndarray

    def load(self) -> np.ndarray:
        return self.rows

    def n_rows_stored(self) -> int:
        return int(self.rows.shape[0])


def array_partitions(data: Any, sizes: Sequence[int]) -> list[ArrayPartition]:
    """Consecutive slices of ``data`` (rows), ``sizes[i]`` rows each (summing to all).

    Parameters
    ----------
    data:
        The rows (a 2-D array, one row per party).
    sizes:
        Rows per partition, in order.

    Returns
    -------
    list of ArrayPartition
        One partition per entry of ``sizes``.

    Examples
    --------
    >>> from fedustat.runtime.engine import array_partitions
    >>> parts = array_partitions(np.arange(12).reshape(6, 2), [2, 4])
    >>> [part.n_rows_stored() for part in parts]
    [2, 4]
    """
    arr = np.asarray(data)
    sizes = [check_positive_int(s, "partition sizes") for s in sizes]
    if sum(sizes) != arr.shape[0]:
        raise ValueError(f"partition sizes add up to {sum(sizes)}, but the data hold "
                         f"{arr.shape[0]} rows")
    cuts = np.cumsum(sizes)[:-1]
    return [ArrayPartition(np.ascontiguousarray(part)) for part in np.split(arr, cuts)]


def parquet_directory(path: str | Path, columns: Sequence[str] | None = None
                      ) -> list[ParquetPartition]:
    """One partition per ``*.parquet`` file of directory ``path`` in name order (parties
    are numbered in it), or the single file ``path``.

    Parameters
    ----------
    path:
        A directory of ``*.parquet`` files, or one Parquet file.
    columns:
        The columns to read, in this order (None: all).

    Returns
    -------
    list of ParquetPartition
        One partition per file; the rows are read where the partition runs.

    Examples
    --------
    >>> import tempfile, pathlib, pandas as pd
    >>> from fedustat.runtime.engine import load_all, parquet_directory
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     pd.DataFrame({"x": [0.1, 0.4]}).to_parquet(pathlib.Path(folder, "a.parquet"))
    ...     pd.DataFrame({"x": [0.5, 0.9, 0.3]}).to_parquet(pathlib.Path(folder, "b.parquet"))
    ...     parts = parquet_directory(folder)
    ...     print(len(parts), load_all(parts).ravel())
    2 [0.1 0.4 0.5 0.9 0.3]
    """
    where = Path(path)
    if where.is_file():
        return parquet_partitions([where], columns)
    if not where.is_dir():
        raise FileNotFoundError(f"partitions: {str(where)!r} is neither a Parquet file nor a "
                                "directory of Parquet files")
    files = sorted(where.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"partitions: directory {str(where)!r} holds no *.parquet "
                                "file (one file per partition)")
    return parquet_partitions(files, columns)


def generated_partitions(generator: Callable[[int, np.random.Generator], Any],
                         sizes: Sequence[int], *, seed: int) -> list[GeneratedPartition]:
    """Partitions of ``sizes[i]`` rows each, drawn by ``generator`` (see
    :class:`GeneratedPartition`). ``generator`` must be picklable (a module-level
    function) so that workers can run it.


    Parameters
    ----------
    generator:
        ``generator(n_rows, rng)`` returning ``n_rows`` rows drawn with ``rng``.
    sizes:
        Rows per partition, in order.
    seed:
        Root seed; partition ``i`` draws from its own child stream.

    Returns
    -------
    list of GeneratedPartition
        One partition per entry of ``sizes``; no row exists until a partition is loaded.

    Examples
    --------
    >>> from fedustat.runtime.engine import generated_partitions, load_all
    >>> def uniform_rows(n_rows, rng):
    ...     return rng.uniform(size=(n_rows, 1))
    >>> load_all(generated_partitions(uniform_rows, [3, 4], seed=0)).shape
    (7, 1)
    """
    as_seed_sequence(seed)
    return [GeneratedPartition(generator, check_positive_int(n, "sizes entries"), int(seed), i)
            for i, n in enumerate(sizes)]


def parquet_partitions(paths: Sequence[str | Path],
                       columns: Sequence[str] | None = None) -> list[ParquetPartition]:
    """One partition per Parquet file, in the given order (parties are numbered in it).

    Parameters
    ----------
    paths:
        The Parquet files, one per partition.
    columns:
        The columns to read, in this order (None: all).

    Returns
    -------
    list of ParquetPartition
        One partition per file.

    Examples
    --------
    >>> import tempfile, pathlib, pandas as pd
    >>> from fedustat.runtime.engine import load_all, parquet_partitions
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = pathlib.Path(folder, "party.parquet")
    ...     pd.DataFrame({"x": [0.5, 0.9], "y": [1, 0]}).to_parquet(path)
    ...     print(load_all(parquet_partitions([path], columns=["y", "x"])))
    [[1.  0.5]
     [0.  0.9]]
    """
    if not paths:
        raise ValueError("parquet_partitions needs at least one file")
    cols = tuple(columns) if columns is not None else None
    return [ParquetPartition(str(p), cols) for p in paths]


def load_all(partitions: Sequence[Partition]) -> np.ndarray:
    """All partitions' rows in one array (for comparisons with the in-process simulator on
    data that fit in memory).


    Parameters
    ----------
    partitions:
        The partitions, in party order.

    Returns
    -------
    numpy.ndarray
        Their rows stacked, shape (rows, columns).

    Examples
    --------
    >>> from fedustat.runtime.engine import array_partitions, load_all
    >>> load_all(array_partitions(np.arange(6).reshape(6, 1), [2, 4])).ravel()
    array([0, 1, 2, 3, 4, 5])
    """
    return np.concatenate([p.load() for p in partitions], axis=0)
