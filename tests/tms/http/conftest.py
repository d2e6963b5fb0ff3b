"""A messaging service behind HTTP on loopback port 0, with a fake clock and no
transaction service: its write-pointer guard is the default ``ClockGuard``, so the route
tests may use write pointers of their own (past ones)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from aiohttp import web

from tests.fakes import FakeClock
from tms.config import TmsConfig
from tms.http.app import HttpConfig
from tms.http.auth import Authorizer
from tms.http.server import HttpServer, HttpServerThread
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.store.tables import Tables

NOW = 1_700_000_000_000


@dataclass
class Served:
    url: str
    service: MessagingService
    clock: FakeClock
    http: requests.Session
    app: web.Application
    tables: Tables
    """A view of the service's store, to check its rows."""


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[object]:
    started: list[tuple[HttpServerThread, MessagingService, requests.Session]] = []

    def make(
        config: HttpConfig | None = None,
        authorizer: Authorizer | None = None,
        tms_config: TmsConfig | None = None,
    ) -> Served:
        clock = FakeClock(NOW)
        store = LevelDBStore(tmp_path / f"db{len(started)}")
        service = MessagingService(
            store,
            tms_config or TmsConfig(tx_max_lifetime_s=10**10),
            clock=clock,
        )
        server = HttpServer(service, config or HttpConfig(port=0, chunk_bytes=128), authorizer)
        thread = HttpServerThread(server)
        url = thread.start()
        session = requests.Session()
        started.append((thread, service, session))
        return Served(url, service, clock, session, server.app, Tables(store))

    yield make
    for thread, service, session in started:
        session.close()
        thread.stop()
        service.close()


@pytest.fixture
def served(make_server: object) -> Served:
    return make_server()  # type: ignore[operator, no-any-return]
