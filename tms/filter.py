"""The transactional consumer's filter: ACCEPT, SKIP, or HOLD (stop the scan). Every
read of a topic (``tms.fetcher``) passes its transactional entries through it.

For an entry written with raw pointer ``ptr`` (None: non-transactional; negative: rolled
back, or negated by cleanup because its transaction was invalid):

* no reader transaction, or ``ptr`` is None   -> ACCEPT
* ``ptr < 0``                                 -> SKIP
* ``tx.is_visible(ptr)``                      -> ACCEPT (committed before the snapshot, or own)
* ``ptr`` in ``tx.invalids``                  -> SKIP
* otherwise (in progress, or newer)           -> HOLD: the whole scan ends here, even if
  non-transactional entries follow. The entry takes its place in the order once it
  commits; skipping it would let two consumers see different orders.
"""

from __future__ import annotations

import enum

from txn.transaction import Transaction

__all__ = ["FilterResult", "accept", "classify"]


class FilterResult(enum.Enum):
    ACCEPT = "accept"
    SKIP = "skip"
    HOLD = "hold"


def accept(tx: Transaction | None, ptr: int | None) -> FilterResult:
    if tx is None or ptr is None:
        return FilterResult.ACCEPT
    if ptr < 0:
        return FilterResult.SKIP
    if tx.is_visible(ptr):
        return FilterResult.ACCEPT
    if tx.is_invalid(ptr):
        return FilterResult.SKIP
    return FilterResult.HOLD


def classify(tx: Transaction | None, ptr: int | None) -> str:
    """What an entry is, as the table debugger shows it, against a fresh transaction
    ``tx``: ``"plain"`` (non-transactional), ``"rolled back"`` (a negated pointer:
    rolled back, or an invalid transaction's entry that cleanup negated),
    ``"committed"``, ``"invalid"``, ``"in progress"``; ``"unknown"`` for a
    transactional entry when there is no transaction to judge by."""
    if ptr is None:
        return "plain"
    if ptr < 0:
        return "rolled back"
    if tx is None:
        return "unknown"
    if tx.is_invalid(ptr):
        return "invalid"
    if tx.is_visible(ptr):
        return "committed"
    return "in progress"
