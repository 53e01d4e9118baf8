"""``fedustat budget``: create or show a privacy budget file; the file ``estimate
--budget`` holds under its lock."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from fedustat.cli._messages import did_you_mean
from fedustat.cli._options import _HelpFormatter, library_default
from fedustat.privacy.budget import (
    ADJACENCY_CLASSES,
    BudgetAccountant,
    BudgetFile,
    FileBudget,
    LedgerEntry,
    LedgerError,
    adjacency_class,
)


def _budget_file(path: Path) -> BudgetFile:
    """The budget file of ``--budget``: held under its lock from the check of the first
    release to the commit of the last (docs/budget.md, "Budget file")."""
    if not path.is_file():
        raise SystemExit(f"error: no budget file {str(path)!r}; create one with "
                         f"`fedustat budget {path} --epsilon E`")

    def announce() -> None:
        print(f"waiting for budget file {str(path)!r}: another release holds its lock "
              f"({path!s}.lock)", file=sys.stderr, flush=True)

    return BudgetFile(path, on_wait=announce)


def _hold_budget(stack: contextlib.ExitStack, budget_file: BudgetFile) -> FileBudget:
    """Take the file's lock and read its ledger as it is now; a reservation left by a run
    that never committed stays counted, and is named on stderr."""
    try:
        budget = stack.enter_context(budget_file)
    except LedgerError as exc:
        raise SystemExit(f"error: {exc}") from None
    for entry in budget.stale:
        who = entry.process.describe() if entry.process is not None else "an unknown process"
        print(f"warning: budget file {str(budget_file.path)!r}: {entry.name!r} (epsilon "
              f"{entry.cost.epsilon:g}, delta {entry.cost.delta:g}) was reserved by {who} "
              "and never committed (that run ended before it finished); it stays counted as "
              "spent", file=sys.stderr)
    return budget


def _ledger_line(entry: LedgerEntry, busy: bool) -> str:
    line = f"  {entry.name}: epsilon {entry.cost.epsilon:g}, delta {entry.cost.delta:g}"
    if entry.status == "reserved":
        who = entry.process.describe() if entry.process is not None else "an unknown process"
        state = ("another process holds the file's lock now, so this run may still be going "
                 "on" if busy else "never committed: that run ended before it finished")
        return f"{line} [reserved by {who}; {state}; counted as spent]"
    if entry.status == "withheld":
        return (f"{line} [withheld: its run delivered more than it reserved; not released, "
                "charged]")
    return line


def cmd_budget(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.epsilon is None:
        if not path.is_file():
            raise SystemExit(f"error: no budget file {str(path)!r}; create one with "
                             f"`fedustat budget {path} --epsilon E`")
        try:
            acct, busy = BudgetFile.read(path)
        except LedgerError as exc:
            raise SystemExit(f"error: {exc}") from None
        eps, delta = acct.remaining
        spent_eps, spent_delta = acct.spent
        print(f"budget {path}: epsilon {acct.epsilon:g}, delta {acct.delta:g}, rule "
              f"{acct.rule}, adjacency {acct.adjacency!r}")
        print(f"spent: epsilon {spent_eps:g}, delta {spent_delta:g}; remaining: epsilon "
              f"{eps:g}, delta {delta:g}")
        for entry in acct.ledger:
            print(_ledger_line(entry, busy))
        return 0
    if path.exists() and not args.force:
        raise SystemExit(f"error: {str(path)!r} exists; add --force to replace it (its "
                         "ledger would be lost)")
    try:
        acct = BudgetAccountant(args.epsilon, args.delta, rule=args.rule,
                                delta_slack=args.delta_slack, adjacency=args.adjacency)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    try:
        BudgetFile.create(path, acct, replace=args.force,
                          on_wait=lambda: print(f"waiting for budget file {str(path)!r}: "
                                                "another release holds its lock",
                                                file=sys.stderr, flush=True))
    except (FileExistsError, LedgerError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"created {path}: epsilon {acct.epsilon:g}, delta {acct.delta:g}, rule {acct.rule}")
    return 0



def _adjacency(text: str) -> str:
    """--adjacency: a relation the library knows (``privacy.budget.ADJACENCY_CLASSES``, a
    full relation or a class name), checked here so that no budget is created under a
    relation every later release would be refused against."""
    if adjacency_class(text) is not None:
        return text
    raise argparse.ArgumentTypeError(
        f"unknown adjacency {text!r}: give a class, "
        f"{', '.join(repr(c) for c in dict.fromkeys(ADJACENCY_CLASSES.values()))}, or a "
        "relation as a protocol states it (docs/budget.md)"
        f"{did_you_mean(text, ADJACENCY_CLASSES)}")


def add_parser(sub: Any) -> None:
    """``fedustat budget``."""
    bud = sub.add_parser("budget", help="create or show a privacy budget file",
                         description="With --epsilon, create FILE holding a privacy budget "
                                     "for one data set; without, show what FILE has spent "
                                     "and what remains. `fedustat estimate --budget FILE` "
                                     "spends it (docs/budget.md).",
                         formatter_class=_HelpFormatter)
    bud.add_argument("file", metavar="FILE", help="the budget file (JSON)")
    # No default: without --epsilon the command shows FILE instead of creating it.
    bud.add_argument("--epsilon", type=float, default=None,
                     help="total epsilon of a new budget (without it: show FILE)")
    # The defaults of a new budget are BudgetAccountant's own.
    bud.add_argument("--delta", type=float,
                     default=library_default(BudgetAccountant, "delta"),
                     help="total delta of a new budget")
    bud.add_argument("--rule", choices=("basic", "advanced", "zcdp"),
                     default=library_default(BudgetAccountant, "rule"),
                     help="composition rule of a new budget")
    bud.add_argument("--delta-slack", type=float, default=None,
                     help="delta' of advanced composition (needed with --rule advanced)")
    bud.add_argument("--adjacency", type=_adjacency,
                     default=library_default(BudgetAccountant, "adjacency"),
                     help="what the budget protects: a class, 'record', 'score', 'label' or "
                          "'add-remove', or a full relation such as 'replace one record' "
                          "or 'add or remove one record' (docs/budget.md)")
    bud.add_argument("--force", action="store_true",
                     help="overwrite an existing budget file")
    bud.set_defaults(func=cmd_budget)
