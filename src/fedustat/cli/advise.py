"""``fedustat advise``: every protocol's predicted error and cost, and a
recommendation."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fedustat.advisor import TRUST_MODELS, advise
from fedustat.catalogue import STATISTICS
from fedustat.cli._options import (
    _HelpFormatter,
    add_bounds,
    add_column_domain,
    add_delta,
    add_epsilon,
    add_format,
)
from fedustat.cli._parsing import _parse_domain_size, _parse_pair, parse_column_bounds

#: Statistics of two public classes given by their sizes (advise --n-pos / --n-neg).
_TWO_CLASS = [s.name for s in STATISTICS.values() if s.columns[-1] == "label"]


def _advise_bounds(args: argparse.Namespace) -> Any:
    """--bounds LO,HI, or per column --column-bounds NAME=LO,HI (kendall's x and y): the
    same spelling as estimate's."""
    if args.bounds and ";" in args.bounds:
        raise SystemExit("error: --bounds takes one pair LO,HI; give each column's bounds "
                         "with --column-bounds, e.g. --column-bounds x=LO,HI "
                         "--column-bounds y=LO,HI")
    if args.column_values:
        raise SystemExit("error: advise takes no --column-values; give the number of public "
                         "values with --domain-size")
    if args.bounds and args.column_bounds:
        raise SystemExit("error: give the public bounds either with --bounds LO,HI or per "
                         "column with --column-bounds, not both")
    if args.column_bounds:
        return parse_column_bounds(args.column_bounds)
    return _parse_pair(args.bounds, "--bounds") if args.bounds else None


def cmd_advise(args: argparse.Namespace) -> int:
    bounds = _advise_bounds(args)
    zeta = _parse_pair(args.zeta, "--zeta") if args.zeta else None
    try:
        advice = advise(args.statistic, n=args.n, n_pos=args.n_pos, n_neg=args.n_neg,
                        epsilon=args.epsilon, delta=args.delta,
                        trust=None if args.trust == "any" else args.trust,
                        max_bits_per_party=args.max_bits, bounds=bounds,
                        domain_size=_parse_domain_size(args.domain_size), zeta=zeta,
                        auc=args.auc, silos=args.silos,
                        records_per_silo=args.records_per_silo)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.format == "json":
        print(json.dumps(advice.to_dict(), indent=2, default=float))
    else:
        print(advice.table())
    return 0



def add_parser(sub: Any) -> None:
    """``fedustat advise``."""
    adv = sub.add_parser(
        "advise", help="predict each protocol's error and cost, and recommend one",
        description="Predict, from the papers' analytic formulas, the MSE of every protocol "
                    "that can compute the statistic, with its bits per party and rounds, "
                    "and recommend the most accurate one that meets the trust model and the "
                    "communication budget (docs/compare.md lists the formulas).",
        formatter_class=_HelpFormatter)
    adv.add_argument("--statistic", required=True, choices=list(STATISTICS),
                     help="the statistic: " + "; ".join(
                         f"{s.name} = {s.description}" for s in STATISTICS.values()))
    adv.add_argument("--n", type=int, default=None,
                     help="number of parties (devices holding one record each)")
    adv.add_argument("--silos", type=int, default=None,
                     help="cross-silo setting: number K of silos (with --records-per-silo)")
    adv.add_argument("--records-per-silo", type=int, default=None,
                     help="records m each silo holds (with --silos; n = K m)")
    adv.add_argument("--n-pos", type=int, default=None,
                     help="positives (public class size) for " + ", ".join(_TWO_CLASS))
    adv.add_argument("--n-neg", type=int, default=None,
                     help="negatives (public class size) for " + ", ".join(_TWO_CLASS))
    add_epsilon(adv)
    add_delta(adv, what="delta; protocols that need delta > 0 are considered only with it")
    adv.add_argument("--trust", choices=["any", *TRUST_MODELS], default="any",
                     help="who may be trusted: local = nobody; secure = secure computation "
                          "with a DP output; label = the server may see scores but not labels; "
                          "curator = a trusted aggregator; any = consider every protocol")
    adv.add_argument("--max-bits", type=float, default=None,
                     help="communication budget: most bits a party (with --silos: a silo) "
                          "may send (default: no limit)")
    add_bounds(adv, what="public bounds LO,HI of the values (required for gini and "
                         "variance); for kendall, per column: --column-bounds x=LO,HI "
                         "--column-bounds y=LO,HI")
    add_column_domain(adv, bounds_help="public bounds of a column (repeatable): x and y of "
                                       "kendall, e.g. --column-bounds x=0,1",
                      values_help=argparse.SUPPRESS)
    adv.add_argument("--domain-size", default=None,
                     help="number of public values of a discrete column (required for "
                          "duplicate; 6,6 for kendall on two 6-point scales; one per "
                          "clustering for rand, e.g. 2,3), or the number of "
                          "grid thresholds for ecdf, quantile and roc")
    adv.add_argument("--zeta", default=None,
                     help="zeta_1,zeta_2 of the Hoeffding decomposition for the subsampling "
                          "protocols (default: data-free worst case)")
    adv.add_argument("--auc", type=float, default=None,
                     help="a public guess of the AUC for the FedAUC predictions (default: "
                          "their worst case over [0, 1])")
    add_format(adv)
    adv.set_defaults(func=cmd_advise)
