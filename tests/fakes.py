"""Small named fakes shared by the tests: clocks and participants."""

from __future__ import annotations

import threading
from collections.abc import Collection

from txn.transaction import Transaction


class FakeClock:
    """A wall clock that moves only when told to (thread-safe)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int = 1) -> int:
        with self._lock:
            self._now += ms
            return self._now

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = ms


class RecordingParticipant:
    """A ``TransactionAware`` that records calls and can be told to fail at any step.

    ``fail_*`` set to an exception raises it; ``*_result`` set to False returns False.
    """

    def __init__(self, name: str, changes: Collection[bytes] = (b"c",)) -> None:
        self.name = name
        self.changes = list(changes)
        self.tx: Transaction | None = None
        self.started = self.checked = self.committed = False
        self.post_committed = self.rolled_back = False
        self.updates: list[Transaction] = []
        self.fail_start: Exception | None = None
        self.fail_changes: Exception | None = None
        self.fail_commit: Exception | None = None
        self.fail_post_commit: Exception | None = None
        self.fail_rollback: Exception | None = None
        self.fail_name: Exception | None = None
        self.commit_result = True
        self.rollback_result = True

    def start_tx(self, tx: Transaction) -> None:
        self.tx = tx
        self.started = True
        self.checked = self.committed = self.post_committed = self.rolled_back = False
        if self.fail_start:
            raise self.fail_start

    def update_tx(self, tx: Transaction) -> None:
        self.tx = tx
        self.updates.append(tx)

    def get_tx_changes(self) -> Collection[bytes]:
        self.checked = True
        if self.fail_changes:
            raise self.fail_changes
        return self.changes

    def commit_tx(self) -> bool:
        self.committed = True
        if self.fail_commit:
            raise self.fail_commit
        return self.commit_result

    def post_tx_commit(self) -> None:
        self.post_committed = True
        if self.fail_post_commit:
            raise self.fail_post_commit

    def rollback_tx(self) -> bool:
        self.rolled_back = True
        if self.fail_rollback:
            raise self.fail_rollback
        return self.rollback_result

    def transaction_aware_name(self) -> str:
        if self.fail_name:
            raise self.fail_name
        return self.name
