"""``RowAccess``: the row operations ``QueueBatch`` gives the mixins it is made of
(``Leasing``, ``Settling``, ``DeadLetters``, ``Purges``), declared once for them."""

from __future__ import annotations

from tms.codec.queue import QueueRow

__all__ = ["RowAccess"]


class RowAccess:
    """What a queue batch's mixins call on the batch; ``QueueBatch`` implements it."""

    def _get(self, message_id: bytes) -> QueueRow | None:
        """The message's row as this batch sees it (None: no such message)."""
        raise NotImplementedError  # QueueBatch's

    def _put(self, old: QueueRow | None, new: QueueRow) -> None:
        """Replace ``old`` (None: a new message) with ``new`` in this batch."""
        raise NotImplementedError  # QueueBatch's

    def _delete(self, row: QueueRow) -> None:
        """Remove ``row`` and its index entry in this batch."""
        raise NotImplementedError  # QueueBatch's
