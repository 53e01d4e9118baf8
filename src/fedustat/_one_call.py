"""The steps every one-call function shares: pick the protocol, check the budget before a
release runs, run it (in process or on the engine), keep it in range, spend the budget.

:mod:`fedustat.api` (the U-statistics), :mod:`fedustat.kendall` (Kendall's tau) build on
them; they sit below both so neither imports the other.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from fedustat._inputs import noise_source
from fedustat._validation import (
    RandomLike,
    check_budget,
    check_delta,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.budget import BudgetAccountant
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate
from fedustat.runtime.simulate import simulate
from fedustat.stats.kernels import Kernel

__all__ = ["DEFAULT_PROTOCOL", "NOISE_CHOICES", "PARTITION_ROWS", "statistic_range"]

DEFAULT_PROTOCOL = "central-laplace"
#: Rows per partition when in-memory data are split for the engine (16 MiB of one
#: float64 column): enough tasks to spread, few enough to keep the scheduler idle.
PARTITION_ROWS = 2**21
#: Values of the ``noise`` argument: seeded NumPy draws for studies, or the OS CSPRNG and
#: fixed-work samplers of fedustat.privacy.samplers, for releases that protect people.
NOISE_CHOICES = ("simulation", "deployment")
def statistic_range(kernel: Kernel) -> tuple[float, float] | None:
    """The valid range of ``kernel``'s reported statistic for any n, or None where none is
    known: :meth:`~fedustat.stats.kernels.Kernel.statistic_range` without public data.

    A U-statistic is a mean of kernel values, so it lies in the kernel's ``output_range``
    (Hoeffding 1948, Sec. 3); a kernel with a map to the reported statistic declares its
    range (AUC and VUS in [0, 1], Mann-Whitney in [0, n+ n-], Rényi-2 in [0, ln C(n,2)]:
    here without n, so [0, inf)); a user kernel with its own map and no declared range
    is not clipped. A private protocol clips its release into the range for its own n in
    its server step, so every transport releases values in range.
    """
    return kernel.statistic_range()


def _in_range(release: Estimate, kernel: Kernel, clip: bool) -> Estimate:
    """``release`` as the caller asked: the protocol's clipped release (clipped here into
    the statistic's range if the protocol left it unclipped: post-processing), or with
    ``clip=False`` the raw release (``raw_value`` as the value, no range)."""
    if not clip:
        return release.unclipped_release()
    bounds = statistic_range(kernel)
    if release.clip_range is not None or bounds is None:
        return release
    return release.clipped(*bounds)


def _partition_sizes(n: int, batch_size: Any) -> list[int]:
    """Rows of each partition when in-memory data go to the engine: ``batch_size`` (an
    int: equal slices; a sequence: these sizes), else ceil(n / PARTITION_ROWS) near-equal
    slices, at least two (a fixed rule, so the split never depends on the cluster)."""
    if batch_size is None:
        parts = min(n, max(2, math.ceil(n / PARTITION_ROWS)))
        q, r = divmod(n, parts)  # np.array_split's rule
        return [q + 1] * r + [q] * (parts - r)
    if isinstance(batch_size, Sequence) and not isinstance(batch_size, str):
        return [int(b) for b in batch_size]
    size = check_positive_int(batch_size, "batch_size")
    return [min(size, n - start) for start in range(0, n, size)]


def _distributed(proto: Any, kernel: Kernel, data: Any, partitions: Any, *, engine: Any,
                 workers: int | None, rng: RandomLike, batch_size: Any) -> Estimate:
    """Run ``proto`` on the engine: partitions as given, or ``data`` split in slices."""
    from fedustat.runtime import engine as eng  # imports Dask only when asked for

    # A protocol with relay rounds and no distributed server step (U-MPC) runs its party
    # steps and relay rounds on the workers and the rest of its server work on the driver,
    # where it declares which of it is a reduction (docs/engine.md, "gathered").
    steps = "gathered" if hasattr(proto, "gathered_reduction") \
        and not hasattr(proto, "distributed_round") else "distributed"
    if steps == "distributed":
        eng.check_supported(proto)  # before any cluster work: a refusal is immediate
    if partitions is not None:
        if data is not None:
            raise ValueError("give the data either as data= (in memory) or as partitions= "
                             "(stored), not both")
        if isinstance(partitions, (str, os.PathLike)):
            parts = eng.parquet_directory(partitions, kernel.columns)
        else:
            parts = list(partitions)
            if not parts or not all(isinstance(p, eng.Partition) for p in parts):
                raise TypeError("partitions must be a Parquet file or directory, or a "
                                "non-empty list of fedustat.runtime.engine.Partition objects")
    else:
        records = kernel.check_data(data)
        parts = eng.array_partitions(records, _partition_sizes(records.shape[0], batch_size))
    runner, own = eng.resolve_engine(engine, workers=workers)
    try:
        release = runner.run(proto, parts, rng=rng, server_steps=steps)
        where = ("local cluster" if isinstance(engine, str) and engine == "local"
                 else str(runner.client.scheduler.address))
        info = {"kind": "dask", "scheduler": where, "workers": runner.n_workers,
                "partitions": len(parts), "server_steps": steps}
    finally:
        if own:
            runner.close()
    return replace(release, diagnostics={**release.diagnostics, "engine": info})


def _check_params(caller: str, protocol: str, params: dict[str, Any]) -> None:
    """Refuse a keyword that is neither the caller's argument nor the protocol's."""
    accepted = registry.parameters(protocol)
    unknown = [key for key in params if key not in accepted]
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}: it is "
                        f"not an argument of {caller} nor a parameter of protocol "
                        f"{protocol!r} (its parameters: {', '.join(accepted) or 'none'})")


def _release(kernel: Kernel, data: Any, *, epsilon: float, delta: float, protocol: str,
             rng: RandomLike, noise: Any, batch_size: Any, caller: str,
             params: dict[str, Any], engine: Any = None, workers: int | None = None,
             partitions: Any = None, clip: bool = True) -> Estimate:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedustat Kernel, got {type(kernel).__name__}")
    if not isinstance(protocol, str):
        raise TypeError(f"protocol must be a protocol name (a string), got {protocol!r}")
    if not isinstance(clip, bool):
        raise TypeError(f"{caller}(): clip must be True or False, got {clip!r}")
    eps = check_budget(epsilon, allow_inf=True)
    dlt = check_delta(delta)
    _check_params(caller, protocol, params)
    source = noise_source(noise, rng)
    if data is None and partitions is None:
        raise ValueError(f"{caller}() needs data (one row per party) or, with an engine, "
                         "partitions= (stored data)")
    if engine is None and (partitions is not None or workers is not None):
        raise ValueError(f"{caller}(): partitions= and workers= are for the distributed "
                         "engine; give engine='local' or a scheduler address too")
    if source is not None:
        if not registry.takes(protocol, "noise"):
            raise ValueError(f"protocol {protocol!r} takes no noise source, so it cannot run "
                             f"with {source.kind} noise")
        params = {**params, "noise": source}
    proto = registry.make(protocol, kernel, epsilon=eps, delta=dlt, **params)
    if engine is not None:
        release = _distributed(proto, kernel, data, partitions, engine=engine,
                               workers=workers, rng=rng, batch_size=batch_size)
        return _in_range(release, kernel, clip)
    records = kernel.check_data(data)
    # With deployment noise the protocol draws every private value (noise, shares, masks,
    # keys) from ``source``; the simulator's own streams, seeded from OS entropy here,
    # only carry public coins (designs, client splits).
    # The transport labels the release with the protocol's randomness grade.
    release = simulate(proto, records, rng=rng, batch_size=batch_size)
    return _in_range(release, kernel, clip)




def _protocol_for(epsilon: float, protocol: str | None) -> str:
    if protocol is not None:
        return protocol
    return "exact" if math.isinf(check_epsilon(epsilon, allow_inf=True)) else DEFAULT_PROTOCOL


def _check_budget(budget: BudgetAccountant | None, kernel: Kernel, epsilon: float,
                  delta: float, protocol: str, single: bool = True, *, data: Any = None,
                  partitions: Any = None, params: dict[str, Any] | None = None) -> None:
    """A release checked against ``budget`` before any party runs (a budget file reserves
    it: ``budget.before_release``), with the guarantee the protocol will deliver on these
    rows: ``Protocol.planned_guarantee`` of the protocol built from the same public
    configuration (its own delta, model and relation). An unknown protocol name or
    parameter is refused later, by ``_release``. ``single=False`` for a composition of
    several releases of (epsilon, delta) in total: not one Gaussian mechanism's, so no rho
    is recovered from it (zCDP budgets then refuse delta > 0)."""
    if budget is None or protocol not in {entry.name for entry in registry.available()}:
        return
    params = params or {}
    if any(key not in registry.parameters(protocol) for key in params):
        return
    eps, dlt = check_epsilon(epsilon, allow_inf=True), check_delta(delta)
    with warnings.catch_warnings():
        # The run builds the protocol again and warns then; planning must not warn twice.
        warnings.simplefilter("ignore")
        planned = registry.make(protocol, kernel, epsilon=eps, delta=dlt, **params
                                ).planned_guarantee(_row_count(kernel, data, partitions))
    if not single:  # _multiclass_auc states the composition as (epsilon, delta)
        planned = replace(planned, epsilon=eps, delta=dlt)
    budget.before_release(planned, name=f"{kernel.name} ({protocol})",
                          gaussian=single and protocol == "fedauc-gaussian")


def _row_count(kernel: Kernel, data: Any, partitions: Any) -> int | None:
    """The public number of rows of a release's data, before it runs (None if unknown)."""
    if data is not None:
        return len(data) if hasattr(data, "__len__") else None  # else refused by the run
    if isinstance(partitions, (str, os.PathLike)):
        from fedustat.runtime import engine as eng  # imports Dask only when asked for

        partitions = eng.parquet_directory(partitions, kernel.columns)
    if isinstance(partitions, list | tuple):
        return sum(int(part.n_rows_stored()) for part in partitions)
    return None


def _spend(budget: BudgetAccountant | None, release: Estimate, protocol: str,
           single: bool = True) -> Estimate:
    """``release``'s guarantee charged to ``budget`` (after it ran); the release itself.
    ``single`` as for :func:`_check_budget`."""
    if budget is not None:
        budget.after_release(release.privacy, name=f"{release.quantity} ({protocol})",
                             gaussian=single and protocol == "fedauc-gaussian")
    return release

