"""Resource limits of the Thrift server, as rules a native event loop can mirror.

All are ``ServerConfig`` values:

* ``max_frame_bytes`` (16 MiB, Tephra's): a frame announcing more, or <= 0, closes its
  connection.
* ``max_pending_frame_bytes`` (64 MiB): the memory of *unfinished* frames across all
  connections. A connection that has received part of a frame holds a reservation of the
  frame's announced size (``FrameBudget``); when the budget cannot cover it, the
  connection stops being read until earlier reservations are released (first come, first
  served), so the server never buffers more than the budget plus one socket read per
  connection. A frame that arrived whole in one read needs no reservation.
* ``frame_timeout_s`` (30 s): a frame begun must be complete within this time of its
  first bytes (time spent waiting for the budget, or with reading paused by the server,
  does not count), else the connection is closed — a slow or stalled sender cannot hold a
  reservation for ever.
* ``idle_timeout_s`` (600 s): a connection with no unfinished frame and no unanswered
  call, that has sent nothing for this long, is closed. Tephra's clients (and
  ``ThriftTxClient``) open a new connection when they find a pooled one closed.
* ``offload_frame_bytes`` (64 KiB): a frame at least this large (a huge ``canCommit``
  change set, a transaction with a long invalid list) is decoded and executed on a
  worker thread, so the event loop goes on serving everyone else meanwhile; the
  connection's later calls wait for it (replies and effects stay in request order).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["FrameBudget"]

H = TypeVar("H")


class FrameBudget(Generic[H]):
    """Reservations of unfinished frames' bytes, granted first come, first served.

    Not thread-safe: the event loop owns it.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiting: OrderedDict[H, int] = OrderedDict()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def reserve(self, holder: H, size: int) -> bool:
        """Reserve ``size`` bytes now (True), or queue ``holder`` for them (False: it is
        granted by a later ``release``). Nobody jumps the queue."""
        if not self._waiting and self.used + size <= self.capacity:
            self.used += size
            return True
        self._waiting[holder] = size
        return False

    def force(self, size: int) -> None:
        """Count ``size`` bytes already held, whatever the budget (a whole frame
        handed to a worker)."""
        self.used += size

    def release(self, size: int) -> list[tuple[H, int]]:
        """Give ``size`` bytes back; return the waiters granted as a result, in order."""
        self.used -= size
        granted = []
        while self._waiting:
            holder, need = next(iter(self._waiting.items()))
            if self.used + need > self.capacity:
                break
            del self._waiting[holder]
            self.used += need
            granted.append((holder, need))
        return granted

    def forget(self, holder: H) -> None:
        """``holder`` no longer waits (its connection closed)."""
        self._waiting.pop(holder, None)
