"""``TxWatch``: what the messaging service knows of its transaction manager, for people
(the console and ``tms top``) and for the table debugger.

It learns the manager's state with Tephra's own calls only — a short transaction
started and aborted at once, as Tephra's pruning does — so it works with any
Tephra-compatible server: the read and write pointers, the transactions in progress
(the probe itself left out) and the invalid list. ``sample()`` records the sizes with the
time into a bounded history (the console draws the invalid list's trend from it);
``snapshot()`` is such a fresh transaction, for judging entries. The last pruning run
is known only where the pruner runs in the same process (the standalone stack): pass
``last_prune``. Every method is thread-safe and raises ``TransactionServiceError`` when
the manager cannot be reached.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tms.errors import TransactionServiceError
from txms_common.clock import SYSTEM_CLOCK, Clock
from txn.errors import TxError
from txn.transaction import MAX_TX_PER_MS, Transaction

__all__ = ["PruneInfo", "TxSource", "TxState", "TxWatch"]


class TxSource(Protocol):
    """The part of a ``TxClient`` the watch uses."""

    def start_short(self, timeout_s: int | None = None) -> Transaction: ...

    def abort(self, tx: Transaction) -> None: ...


class PruneInfo(Protocol):
    """A finished pruning run (``txn.prune.PruneRun``)."""

    @property
    def at_ms(self) -> int: ...

    @property
    def removed(self) -> int: ...

    @property
    def max_removed(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class TxState:
    """The manager as a fresh transaction saw it at ``at_ms``."""

    at_ms: int
    read_pointer: int
    write_pointer: int
    in_progress: int
    oldest_in_progress_ms: int | None
    invalid: int


class TxWatch:
    """See the module docstring."""

    def __init__(
        self,
        client: TxSource,
        *,
        where: str,
        clock: Clock = SYSTEM_CLOCK,
        last_prune: Callable[[], PruneInfo | None] | None = None,
        keep: int = 720,
    ) -> None:
        """``where``: how people know the manager (``host:port``, "in process")."""
        self._client = client
        self.where = where
        self._clock = clock
        self._last_prune = last_prune
        self._lock = threading.Lock()
        self._history: deque[TxState] = deque(maxlen=keep)

    def snapshot(self) -> Transaction:
        """A fresh transaction (started and aborted): what is committed now."""
        try:
            tx = self._client.start_short()
            self._client.abort(tx)
        except TxError as exc:
            raise TransactionServiceError(
                f"the transaction manager at {self.where} cannot be reached: {exc}"
            ) from exc
        return tx

    def sample(self) -> TxState:
        """The state now, also kept in the history."""
        tx = self.snapshot()
        others = [t for t in tx.in_progress if t != tx.transaction_id]
        state = TxState(
            at_ms=self._clock.now_ms(),
            read_pointer=tx.read_pointer,
            write_pointer=tx.write_pointer,
            in_progress=len(others),
            oldest_in_progress_ms=min(others) // MAX_TX_PER_MS if others else None,
            invalid=len(tx.invalids),
        )
        with self._lock:
            self._history.append(state)
        return state

    def to_json(self) -> dict[str, Any]:
        """The REST API's ``TransactionState``: a fresh sample, the history, the last
        pruning run (null where not known)."""
        now = self.sample()
        with self._lock:
            history = list(self._history)
        run = self._last_prune() if self._last_prune is not None else None
        return {
            "manager": self.where,
            "time": now.at_ms,
            "readPointer": now.read_pointer,
            "writePointer": now.write_pointer,
            "inProgress": now.in_progress,
            "oldestInProgressTime": now.oldest_in_progress_ms,
            "invalid": now.invalid,
            "history": [
                {"time": s.at_ms, "invalid": s.invalid, "inProgress": s.in_progress}
                for s in history
            ],
            "lastPrune": None
            if run is None
            else {"time": run.at_ms, "removed": run.removed, "maxRemoved": run.max_removed},
            "pruneKnown": self._last_prune is not None,
        }
