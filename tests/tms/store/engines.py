"""The storage engines every contract test runs on: a new engine is one entry here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.memory import MemoryStore

ENGINES: dict[str, Callable[[Path], KeyValueStore]] = {
    "memory": lambda _tmp: MemoryStore(),
    "leveldb": lambda tmp: LevelDBStore(tmp / "db"),
}
"""Engine name -> a new, empty store in a fresh directory."""
