"""The ``tms`` format against a clustered deployment (docs/operations.md): a job given the
list of every messaging instance's URL and the transaction service's ``zk://`` address
writes and reads through whichever instance answers, and keeps working when the instance
that owns its topic is killed with -9 between two jobs: the next job's writes reach the
new owner, and a read sees every committed row exactly once."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.integration.chaos import Topology, running
from tms.model import TopicId
from txms_testing import ZooKeeperEnsemble

TOPIC = TopicId("default", "spread")
_bases = itertools.count(1)


@pytest.fixture
def topology(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[Topology]:
    with running(zk_ensemble, pg_url, f"/sparkha{next(_bases)}") as top:
        yield top


def write(spark: Any, options: dict[str, str], first: int, count: int) -> None:
    rows = [(f"m{i}".encode(),) for i in range(first, first + count)]
    df = spark.createDataFrame(rows, "payload binary").repartition(3)
    df.write.format("tms").mode("append").options(**options).save()


def test_jobs_go_through_any_instance_and_past_a_killed_owner(
    spark: Any, topology: Topology
) -> None:
    options = {"url": ",".join(topology.urls), "txServer": topology.tx_url, "topic": "spread"}
    with topology.client() as client:
        client.create_topic(TOPIC)
    # Given a job that wrote through the list of instances
    write(spark, options, 0, 300)
    owners = requests.get(f"{topology.urls[0]}/v1/cluster", timeout=30).json()["owners"]
    owner = next(i for i in topology.tmss if i.name == owners["default.spread"])
    # When the topic's owner is killed -9, and another job writes
    owner.kill()
    write(spark, options, 300, 300)
    # Then a read through the same list sees both jobs' rows, each once
    read = spark.read.format("tms").options(**options).load()
    payloads = sorted(bytes(r.payload) for r in read.collect())
    assert payloads == sorted(f"m{i}".encode() for i in range(600))
    after = requests.get(
        f"{next(i.url for i in topology.tmss if i is not owner)}/v1/cluster", timeout=30
    ).json()["owners"]
    assert after["default.spread"] != owner.name  # another instance took the topic over
