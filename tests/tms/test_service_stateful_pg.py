"""The messaging service against the list model of ``test_service_stateful``, on
PostgreSQL: publishes stored as runs (``tms.store.postgres.runs``), rollbacks negating
entries inside them, reads resumed from any id (inside a run too), restarts."""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.tms.test_service_stateful import ServiceMachine
from tms.config import TmsConfig
from tms.service import MessagingService
from tms.store.postgres import PostgresStore
from txms_testing.postgres import PostgresCluster

_databases = itertools.count()


class PostgresServiceMachine(ServiceMachine):
    cluster: PostgresCluster  # set by the test
    url = ""

    def _open(self) -> MessagingService:
        if not self.url:
            self.url = self.cluster.create_database(f"stateful{next(_databases)}")
        return MessagingService(
            PostgresStore(self.url), TmsConfig(tx_max_lifetime_s=10**6), clock=self.clock
        )


def test_the_service_on_postgresql_reads_as_the_model(pg_cluster: PostgresCluster) -> None:
    PostgresServiceMachine.cluster = pg_cluster
    run_state_machine_as_test(
        PostgresServiceMachine,
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None),
    )
