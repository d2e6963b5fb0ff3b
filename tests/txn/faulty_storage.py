"""Fault injection for a transaction log on memory storage: a full disk (``failing``:
every write raises) and a slow one (while ``gate`` is clear, a sync waits for it)."""

from __future__ import annotations

import threading

from txn.errors import TxStorageError
from txn.persist.memory import MemoryStorage


class FaultyStorage(MemoryStorage):
    """Memory storage whose logs fail or stall on demand: once ``failing`` is set, every
    write raises (as a full disk would); while ``gate`` is clear, a sync sets ``holding``
    and waits for the gate (at most 30 s), so whoever syncs stops there and nothing
    appended since the last sync becomes durable."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.gate = threading.Event()
        self.gate.set()
        self.holding = threading.Event()

    def create_log(self, timestamp_ms: int) -> object:  # type: ignore[override]
        log = super().create_log(timestamp_ms)
        storage = self

        class FaultyLog:
            def write(self, data: bytes) -> None:
                if storage.failing:
                    raise TxStorageError("No space left on device")
                log.write(data)

            def sync(self) -> None:
                if not storage.gate.is_set():
                    storage.holding.set()
                    storage.gate.wait(30)
                log.sync()

            def close(self) -> None:
                log.close()

            def fileno(self) -> None:  # no descriptor: the native log writes through write()
                return None

        return FaultyLog()
