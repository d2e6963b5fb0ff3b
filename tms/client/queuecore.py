"""The sans-I/O core of the queue shells, ``tms.client.queue`` (threads) and
``tms.aio.queue`` (asyncio): what they share, with no requests, threads or event loop in
it — the messages and deliveries as the service takes them, the times as it takes them,
and the bookkeeping of a transaction's queue work (which write pointers of which queues
it touched, whether the outcome of one of those writes is unknown, and whether a
rollback is then proven).
"""

from __future__ import annotations

from collections.abc import Iterable

from tms.client.aware import outcome_unknown
from tms.model import TopicId
from tms.queues import EnqueueItem, QueueMessage, Receipt

__all__ = [
    "Deliveries",
    "TxQueueWork",
    "delay_ms_of",
    "items_of",
    "lease_ms_of",
    "receipts_of",
    "wait_ms_of",
]

Deliveries = Iterable[QueueMessage | Receipt | str]


def items_of(messages: Iterable[EnqueueItem | bytes | str]) -> list[EnqueueItem]:
    """Messages to enqueue as ``EnqueueItem``s (bytes as they are, text as UTF-8)."""
    return [
        m if isinstance(m, EnqueueItem) else EnqueueItem(m.encode() if isinstance(m, str) else m)
        for m in messages
    ]


def receipts_of(deliveries: Deliveries) -> list[Receipt]:
    """The receipts of deliveries: messages, receipts, or receipts as text."""
    out = []
    for d in deliveries:
        if isinstance(d, QueueMessage):
            out.append(d.receipt)
        elif isinstance(d, Receipt):
            out.append(d)
        else:
            out.append(Receipt.parse(d))
    return out


def lease_ms_of(lease_s: float | None) -> int | None:
    """A lease in ms (at least 1); None: the queue's own."""
    return None if lease_s is None else max(1, int(lease_s * 1000))


def wait_ms_of(wait_s: float) -> int:
    """A receive's wait in ms."""
    return int(wait_s * 1000)


def delay_ms_of(delay_s: float | None) -> int | None:
    """A nack's delay in ms; None: the queue's back-off."""
    return None if delay_s is None else int(delay_s * 1000)


class TxQueueWork:
    """The queue work of one transaction: the (queue, write pointer) pairs it enqueued or
    acked under (``joined``), and whether a write's outcome is unknown (``failed``). The
    shell settles ``to_settle()`` after the commit, or the other way on a rollback, and
    reports a rollback as proven (``rollback_proven``) only when no write is in doubt and
    every settle succeeded: otherwise the transaction must be invalidated. Not
    thread-safe: one transaction's."""

    __slots__ = ("in_doubt", "touched")

    def __init__(self) -> None:
        self.touched: set[tuple[TopicId, int]] = set()
        self.in_doubt = False

    def joined(self, topic: TopicId, write_pointer: int) -> None:
        self.touched.add((topic, write_pointer))

    def failed(self, exc: BaseException) -> None:
        """A write under the transaction raised ``exc``."""
        self.in_doubt = self.in_doubt or outcome_unknown(exc)

    def to_settle(self) -> list[tuple[TopicId, int]]:
        """What to settle, in a stable order (by queue, then write pointer)."""
        return sorted(self.touched, key=lambda t: (str(t[0]), t[1]))

    def rollback_proven(self, settled_all: bool) -> bool:
        return settled_all and not self.in_doubt
