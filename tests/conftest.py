from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from txn import engine

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
settings.register_profile(
    "thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=1000
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The engines (ZooKeeper, PostgreSQL) as session fixtures, for every test that asks.
from tests.engines import pg_cluster, pg_url, zk_ensemble  # noqa: E402, F401

# The engine every manager of the suite runs on unless a test names one: TXN_ENGINE
# (native, python; unset: native when built). `make test` runs the txn tests once per
# engine; servers started as processes read the same variable.
engine.set_default(os.environ.get("TXN_ENGINE", "auto"))


def pytest_report_header() -> str:
    return f"txn engine: {engine.resolve().name}"
