"""A driver killed between publishing its job's commit markers and committing: the
job's transaction is invalidated within seconds (its lease keeper sees the driver gone),
so transactional consumers stop being held at the markers and never see the rows.

The driver is a real Spark (``local[2]``) in its own process session; the fault is
injected at the exact point: when the messaging service has written the job's markers,
every process of the driver's session is killed with SIGKILL before the answer goes out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers import Stack
from tms.model import TopicId
from tms.operations import Operation
from tms.spark.cluster import kill_session

DRIVER = """
import sys
from tms.spark import local_session
spark = local_session("driver-killed", master="local[2]")
url, tx, topic = sys.argv[1:4]
df = spark.range(300, numPartitions=3).selectExpr("cast(id as string) as payload")
df.write.format("tms").mode("append").options(
    url=url, txServer=tx, topic=topic, txTimeoutS="3600"
).save()
print("SAVED", flush=True)
"""


def test_a_driver_killed_between_markers_and_commit_releases_consumers(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = TopicId("default", "orphaned")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, ["before"])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, stack.url, stack.tx_address, topic.topic],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    real_submit = stack.service.submit_async
    killed: list[float] = []

    async def kill_after_markers(op: Operation[object]) -> object:
        result = await real_submit(op)
        if op.topic == topic and op.kind == "markers":
            kill_session(driver.pid)  # the markers are in; no commit will ever come
            killed.append(time.monotonic())
        return result

    monkeypatch.setattr(stack.service, "submit_async", kill_after_markers)
    try:
        driver.wait(timeout=240)
    finally:
        kill_session(driver.pid)
    assert driver.stdout is not None
    with driver.stdout:
        output = driver.stdout.read()
    assert killed, "the driver never published its markers"
    assert b"SAVED" not in output
    everything = stack.messaging.poll(topic).messages  # non-transactional: markers included
    assert len(everything) == 301

    # Then a transactional consumer is released within seconds, not at the transaction's
    # timeout (an hour here), and never sees the job's rows
    deadline = time.monotonic() + 60
    while True:
        reader = stack.tx.start_short()
        result = stack.messaging.poll(topic, transaction=reader)
        stack.tx.abort(reader)
        if not result.held:
            break
        assert time.monotonic() < deadline, "consumers are still held at the markers"
        time.sleep(0.2)
    assert [m.payload for m in result.messages] == [b"before"]
    stack.messaging.publish(topic, ["after"])
    reader = stack.tx.start_short()
    assert [m.payload for m in stack.messaging.poll(topic, transaction=reader).messages] == [
        b"before",
        b"after",
    ]
