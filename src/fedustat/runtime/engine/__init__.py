"""Distributed runs on Dask: batches of parties as tasks, server steps as reductions.

See docs/engine.md. ``pip install '.[engine]'`` (in the checkout) brings Dask; this
package imports it only when an engine is created.
"""

from fedustat.runtime.engine.counts import (
    distributed_ecdf_counts,
    dp_ecdf_distributed,
    dp_roc_curve_distributed,
    pointwise_ecdf_distributed,
)
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
    "distributed_ecdf_counts",
    "dp_ecdf_distributed",
    "dp_roc_curve_distributed",
    "generated_partitions",
    "load_all",
    "parquet_directory",
    "parquet_partitions",
    "pointwise_ecdf_distributed",
    "resolve_engine",
    "run_distributed",
]
