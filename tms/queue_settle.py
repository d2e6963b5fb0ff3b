"""``Settling``: a transaction's outcome applied to its pending enqueues and acks in a
queue (a part of ``tms.queue_batch.QueueBatch``): on the word of its client
(``Settle``), or of the transaction manager (``WritePointerGuard.outcomes``) in the
batch's housekeeping."""

from __future__ import annotations

import dataclasses
from itertools import islice

from tms.codec import queue as qc
from tms.codec.queue import QueueRow
from tms.guard import WritePointerGuard
from tms.queue_access import RowAccess
from tms.queue_index import IndexScans
from tms.queue_purge import HOUSEKEEPING_ROWS
from tms.queues import QueueState, SettleRequest

__all__ = ["Settling"]


class Settling(IndexScans, RowAccess):
    """The settling of ``QueueBatch`` (see the module docstring)."""

    _now: int
    _guard: WritePointerGuard

    def _waiting(self, row: QueueRow, due_ms: int) -> QueueRow:
        raise NotImplementedError  # QueueBatch's

    def settle(self, request: SettleRequest) -> int:
        return self._settle(request.tx_write_pointer, request.commit)

    def _settle(self, wp: int, commit: bool) -> int:
        """Apply a transaction's outcome to its pending enqueues and acks; how many."""
        count = 0
        for kind in (b"p", b"w"):
            start = wp.to_bytes(8, "big")
            stop = (wp + 1).to_bytes(8, "big")
            for key in list(self._entries(kind, start=start, stop=stop)):
                row = self._get(qc.index_entry_id(key))
                if row is None or row.tx_write_pointer != wp:
                    continue
                count += 1
                if row.state is QueueState.PENDING:
                    if commit:
                        self._put(row, self._waiting(row, row.due_ms))
                    else:
                        self._delete(row)
                elif commit:  # an ack pending
                    self._put(
                        row,
                        dataclasses.replace(
                            row, state=QueueState.ACKED, done_ms=self._now, tx_write_pointer=0
                        ),
                    )
                else:
                    self._put(row, dataclasses.replace(row, tx_write_pointer=0))
        return count

    def _settle_known(self) -> None:
        pointers = {
            qc.index_entry_time(key)
            for kind in (b"p", b"w")
            for key in islice(self._entries(kind), HOUSEKEEPING_ROWS)
        }
        for wp, committed in self._guard.outcomes(pointers).items():
            self._settle(wp, committed)
