"""Dead-letter queues: a queue's dead messages moved to another queue (a part of
``tms.queue_batch.QueueBatch``).

A queue whose ``dead_letter_queue`` property names another queue of its namespace does
not keep its dead messages: the batch that would make one DEAD makes it MOVING instead
(counted as dead, never delivered, not purged, its ack answers ``lease_lost``). Each
queue has its own writer and fence (one writer per topic), so the move cannot be one
write; it is three, each atomic and synced, in an order that loses nothing and never
leaves a message deliverable in both queues:

1. the source's batch makes the message MOVING (``tms.queue_batch``) and writes beside
   it a *destination* row naming the dead-letter queue of that moment: the move ends
   there whatever the property says later (removed or changed meanwhile);
2. the target's batch adds a copy (``dead_letter_in``): READY now, a new id of the
   target's, its payload, key, priority, enqueue time and attempts kept, and an
   *origin* row (source prefix and id → new id) so that the same move again adds
   nothing;
3. the source's batch removes the MOVING message, and only once the target's origin row
   for it is in the store (``dead_letter_done``): nothing is removed on anyone's word.
   If the target is gone (deleted, or no longer a queue), the message becomes DEAD in
   the source instead, and stays there as dead messages do.

A crash between two steps leaves the message MOVING in the source; the move is run
again (``MessagingService.move_dead_letters``: after the batch that made it, and by
cleanup), and step 2 finds its origin row. Between steps 2 and 3 the copy in the target
is the only one that can be delivered. Each step is written by its own queue's writer,
so with several instances (``tms.ownership``) step 2 is the target owner's and step 3
the source owner's; the service runs each step where it may and tells the other owner
(``tms.service_queues``). The key goes along to the target's key table if the target
has no message with that key; otherwise the copy keeps it in its row but the key stays
the other message's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from tms.codec.queue import QueueRow
from tms.journal import Journal
from tms.queue_access import RowAccess
from tms.queues import QueueMessage, QueueState
from tms.store.queues import QueueTables
from tms.store.tables import TableBatch

__all__ = ["DeadLetters"]


class DeadLetters(RowAccess):
    """The dead-letter steps of ``QueueBatch`` (see the module docstring)."""

    _q: QueueTables
    _prefix: bytes
    _batch: TableBatch
    _now: int
    _next_id: Callable[[], bytes]
    _keys: dict[str, bytes | None]
    _origins: set[bytes]
    """Origins copied in this batch (not in the store yet)."""
    _journal: Journal

    def _id_of_key(self, key: str) -> bytes | None:
        raise NotImplementedError  # QueueBatch's

    def dead_letter_in(self, origin: bytes, messages: Sequence[QueueMessage]) -> int:
        """Step 2: copies of ``messages`` (dead in the queue whose prefix is ``origin``),
        each once whatever how often it is sent; how many were added now."""
        added = 0
        seen = self._origins
        for message in messages:
            source = origin + message.id
            if source in seen or self._q.id_of_origin(self._prefix, source) is not None:
                continue
            self._journal.add(seen, source)
            new_id = self._next_id()
            key = message.key
            row = QueueRow(
                new_id, QueueState.READY, message.priority, message.attempt,
                message.enqueued_ms, self._now, key=key, payload=message.payload,
            )  # fmt: skip
            self._put(None, row)
            if key is not None and self._id_of_key(key) is None:
                self._journal.put(self._keys, key, new_id)
                self._q.put_key(self._batch, self._prefix, key, new_id)
            self._q.put_origin(self._batch, self._prefix, source, new_id)
            added += 1
        return added

    def dead_letter_done(self, target: bytes | None, ids: Sequence[bytes]) -> int:
        """Step 3: remove those of the MOVING messages ``ids`` whose copy the dead-letter
        queue with prefix ``target`` holds (its origin row says so: nothing is removed on
        anyone's word); with ``target`` None (their dead-letter queue is gone) make them
        DEAD here instead. How many changed."""
        changed = 0
        for message_id in ids:
            row = self._get(message_id)
            if row is None or row.state is not QueueState.MOVING:
                continue
            if target is None:
                self._put(row, dataclasses.replace(row, state=QueueState.DEAD))
            elif self._q.id_of_origin(target, self._prefix + message_id) is None:
                continue  # not copied (yet): it stays MOVING
            elif self._release_origin(row, copies=True):
                self._delete(row)
            else:
                continue  # a copy itself, whose own original is still moving: later
            self._q.delete_destination(self._batch, self._prefix, message_id)
            changed += 1
        return changed

    def _release_origin(self, row: QueueRow, *, copies: bool) -> bool:
        """Before ``row`` is removed (purged, or moved on): if it is a dead letter copied
        here, its origin rows go with it, but only once its move is finished (the
        original is gone from its queue); until then a move run again must still find
        them, so it is kept (False). ``copies``: whether this queue holds any copy."""
        origin = self._q.origin_of(self._prefix, row.id) if copies else None
        if origin is None:
            return True
        if self._q.source_exists(origin):
            return False
        self._q.delete_origin(self._batch, self._prefix, origin, row.id)
        return True
