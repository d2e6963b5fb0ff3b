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

__all__ = ["FilterResult", "accept"]


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
