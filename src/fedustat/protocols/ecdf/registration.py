"""The federated ECDF evaluations by name: ``ecdf-secagg`` and ``ecdf-fss``.

They release a curve over a public grid of one column, not a U-statistic of a kernel, so
they go to the registry's separate curve registry
(:func:`fedustat.protocols.registry.register_curve`): a factory takes the budget and the
curve's parameters, and no kernel. The command line's ``serve``/``party`` run them by name.
"""

from __future__ import annotations

from typing import Any

from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols.ecdf.fss import FssECDF
from fedustat.protocols.ecdf.secagg import PointwiseECDF
from fedustat.protocols.ecdf.secagg_plus import SecAggPlusECDF
from fedustat.protocols.ecdf.shared_noise import Randomness
from fedustat.protocols.registry import register_curve

__all__: list[str] = []


def _ecdf_secagg(*, epsilon: float, thresholds: Any = None, query: Any = None,
                 n_servers: int = 2, contributors: int | None = None, min_honest: int = 1,
                 frac_bits: int | None = None, ring_bits: int = 64,
                 randomness: Randomness | None = None, bounds: Any = None,
                 precision: float | None = None, method: str | None = None,
                 aggregation: str = "servers", degree: int | None = None,
                 threshold: int | None = None, max_dropout: float = 0.3
                 ) -> PointwiseECDF | SecAggPlusECDF:
    if aggregation == "secagg+":
        if n_servers != 2 or contributors is not None:
            raise ValueError("n_servers and contributors apply to aggregation='servers'; "
                             "with aggregation='secagg+' the server aggregates and every "
                             "party contributes noise (set min_honest)")
        return SecAggPlusECDF(thresholds, query, epsilon=epsilon, min_honest=min_honest,
                              degree=degree, threshold=threshold, max_dropout=max_dropout,
                              frac_bits=frac_bits, ring_bits=ring_bits,
                              randomness=randomness, bounds=bounds, precision=precision,
                              method=method)
    if aggregation != "servers":
        raise ValueError(f"aggregation must be 'servers' (additive shares for computing "
                         f"parties 0..m-1) or 'secagg+' (the server aggregates masked "
                         f"inputs; tolerates dropouts), got {aggregation!r}")
    if (degree, threshold, max_dropout) != (None, None, 0.3):
        raise ValueError("degree, threshold and max_dropout apply to aggregation='secagg+'")
    return PointwiseECDF(thresholds, query, epsilon=epsilon, n_servers=n_servers,
                         contributors=contributors, min_honest=min_honest,
                         frac_bits=frac_bits, ring_bits=ring_bits, randomness=randomness,
                         bounds=bounds, precision=precision, method=method)


def _ecdf_fss(*, epsilon: float, thresholds: Any = None, query: Any = None,
              n_servers: int = 2, contributors: int | None = None, min_honest: int = 1,
              frac_bits: int | None = None, ring_bits: int = 64,
              randomness: Randomness | None = None, bounds: Any = None,
              precision: float | None = None, method: str | None = None) -> FssECDF:
    return FssECDF(thresholds, query, epsilon=epsilon, n_servers=n_servers,
                   contributors=contributors, min_honest=min_honest, frac_bits=frac_bits,
                   ring_bits=ring_bits, randomness=randomness, bounds=bounds,
                   precision=precision, method=method)


register_curve("ecdf-secagg", _ecdf_secagg, model=PrivacyModel.CENTRAL,
               summary="ECDF at a query of grid points: parties secret-share indicators "
                       "among m computing parties, which add distributed tree noise "
                       "(default for the whole grid: the b-ary hierarchical tree with least "
                       "squares; method='003-tree' for 003 as written); "
                       "aggregation='secagg+': the server sums masked inputs and tolerates "
                       "dropouts (SecAgg+)",
               source="003 Sec. 4.1; 002 Protocol B.1; Hay et al. 2010 Sec. 4; Bonawitz "
                      "et al. 2017; Bell et al. 2020")
register_curve("ecdf-fss", _ecdf_fss, model=PrivacyModel.COMPUTATIONAL,
               summary="ECDF at a query of grid points: parties send DCF keys to two "
                       "computing parties, which evaluate them and add tree noise",
               source="003 Sec. 4.2; 002 Protocol B.1")
