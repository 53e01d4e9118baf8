"""Distributed runs on Dask: batches of parties as tasks, server steps as reductions.

See docs/engine.md. ``pip install fedustat[engine]`` brings Dask; this package imports
it only when an engine is created.
"""

from fedustat.runtime.engine.driver import (
    DaskEngine,
    EngineError,
    check_address,
    check_supported,
    resolve_engine,
    run_distributed,
)
from fedustat.runtime.engine.partitions import (
    ArrayPartition,
    GeneratedPartition,
    ParquetPartition,
    Partition,
    array_partitions,
    generated_partitions,
    load_all,
    parquet_directory,
    parquet_partitions,
)

__all__ = [
    "ArrayPartition",
    "DaskEngine",
    "EngineError",
    "GeneratedPartition",
    "ParquetPartition",
    "Partition",
    "array_partitions",
    "check_address",
    "check_supported",
    "generated_partitions",
    "load_all",
    "parquet_directory",
    "parquet_partitions",
    "resolve_engine",
    "run_distributed",
]
