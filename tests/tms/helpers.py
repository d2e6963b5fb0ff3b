"""Small helpers for tms tests."""

from __future__ import annotations

from tms.model import Message
from txms_common.clock import Clock
from txn.config import TxConfig
from txn.manager import TransactionManager
from txn.transaction import NO_TX_IN_PROGRESS, Transaction


def tx(
    read: int, write: int, invalids: tuple[int, ...] = (), in_progress: tuple[int, ...] = ()
) -> Transaction:
    """CDAP's ``Tx(r, w, inv, inProg)`` shorthand."""
    return Transaction(
        transaction_id=write,
        read_pointer=read,
        write_pointer=write,
        invalids=tuple(sorted(invalids)),
        in_progress=tuple(sorted(in_progress)),
        first_short_in_progress=min(in_progress) if in_progress else NO_TX_IN_PROGRESS,
    )


def payloads(messages: list[Message]) -> list[bytes]:
    return [m.payload for m in messages]


class IncrementalClock:
    """0, 1, 2, ... per call (CDAP's IncrementalTimeProvider)."""

    def __init__(self) -> None:
        self.now = -1

    def now_ms(self) -> int:
        self.now += 1
        return self.now


def pruning_manager(clock: Clock) -> TransactionManager:
    """A started manager on ``clock`` with a 60 s lifetime, 10 s of pruning grace, and
    one pruning participant in another process, ``tms`` (what cleanup reports as)."""
    manager = TransactionManager(
        TxConfig(
            cleanup_interval_s=0,
            snapshot_interval_s=0,
            max_lifetime_s=60,
            prune_grace_s=10,
            prune_participants=("tms",),
        ),
        clock=clock,
    )
    manager.start()
    return manager
