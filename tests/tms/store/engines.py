"""The storage engines every contract test runs on: a new engine is one entry here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.memory import MemoryStore
from tms.store.postgres import PostgresStore

ENGINES: dict[str, Callable[[pytest.FixtureRequest, Path], KeyValueStore]] = {
    "memory": lambda _request, _tmp: MemoryStore(),
    "leveldb": lambda _request, tmp: LevelDBStore(tmp / "db"),
    # a new database in the session's PostgreSQL cluster (skipped without PostgreSQL)
    "postgres": lambda request, _tmp: PostgresStore(request.getfixturevalue("pg_url")),
}
"""Engine name -> a new, empty store (in a fresh directory or database)."""
