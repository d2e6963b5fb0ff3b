from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.memory import MemoryStore
from tms.store.tables import Tables


@pytest.fixture(params=["memory", "leveldb"])
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStore]:
    store: KeyValueStore = (
        MemoryStore() if request.param == "memory" else LevelDBStore(tmp_path / "db")
    )
    yield store
    store.close()


@pytest.fixture
def tables(kv: KeyValueStore) -> Tables:
    return Tables(kv)
