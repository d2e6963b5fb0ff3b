from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tms.queue_store import clock, store, svc  # noqa: F401 (the queue tests' fixtures)
from tests.tms.store.engines import ENGINES
from tms.store.kv import KeyValueStore
from tms.store.tables import Tables


@pytest.fixture(params=list(ENGINES))
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStore]:
    """A new store on each engine (``tests.tms.store.engines``)."""
    engine = ENGINES[request.param](request, tmp_path)
    yield engine
    engine.close()


@pytest.fixture
def tables(kv: KeyValueStore) -> Tables:
    return Tables(kv)
