from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
settings.register_profile(
    "thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=1000
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The engines (ZooKeeper, PostgreSQL) as session fixtures, for every test that asks.
from tests.engines import pg_cluster, pg_url, zk_ensemble  # noqa: E402, F401
