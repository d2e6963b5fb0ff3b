"""The ``tms`` format on a real Spark standalone cluster: a Master and two Workers with
one core each, started from the pyspark package on loopback (``tms.spark.cluster``);
drivers submitted with ``spark-submit`` in client mode; executors and drivers killed
with SIGKILL. The servers run in this process (loopback, port 0), which lets the tests
inject faults at exact points of the protocol."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from examples import program_states as example
from tests.servers import Stack
from tests.spark.test_write_read import committed
from tms.model import TopicId
from tms.operations import Operation
from tms.spark.cluster import QUICK_START, LocalCluster, kill_session

JOBS = Path(__file__).with_name("cluster_jobs.py")
EXAMPLE = Path(__file__).parents[2] / "examples" / "program_states.py"
SRC, DST = TopicId("default", "src"), TopicId("default", "dst")

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster"), java_options=QUICK_START) as running:
        yield running


def submit(cluster: LocalCluster, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return cluster.submit(JOBS, args, stdout=out, stderr=subprocess.STDOUT)


def finish(driver: subprocess.Popen[bytes], log: Path, timeout_s: float = 300) -> str:
    try:
        code = driver.wait(timeout=timeout_s)
    finally:
        kill(driver)
    text = log.read_text(errors="replace")
    assert code == 0, text[-4000:]
    return text


def kill(driver: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's whole session: its Python, its JVM, Spark's Python daemon
    and workers."""
    kill_session(driver.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        driver.wait(timeout=30)


def eventually(check: Callable[[], bool], what: str, deadline_s: float = 240) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, f"not within {deadline_s} s: {what}"
        time.sleep(0.3)


def payloads(stack: Stack, topic: TopicId) -> list[str]:
    return [p.decode() for _, p in committed(stack, topic)]


def test_batch_write_with_an_executor_killed_mid_job(
    cluster: LocalCluster, stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = TopicId("default", "killed-executor")
    stack.messaging.create_topic(topic)
    real_submit = stack.service.submit_async
    killed: list[int] = []

    async def kill_an_executor(op: Operation[object]) -> object:
        if op.topic == topic and op.kind == "store" and not killed:
            executors = cluster.executors()
            assert executors, "no executor to kill"
            os.kill(executors[0], signal.SIGKILL)  # mid-job: tasks are storing rows
            killed.append(executors[0])
        return await real_submit(op)

    monkeypatch.setattr(stack.service, "submit_async", kill_an_executor)
    log = tmp_path / "driver.log"
    args = ("batch", stack.url, stack.tx_address, topic.topic, "4000")
    out = finish(submit(cluster, log, *args), log)
    assert "WRITTEN" in out and killed
    seen = payloads(stack, topic)
    assert len(seen) == 4000 and set(seen) == {f"m{i}" for i in range(4000)}  # each once


def test_a_streaming_query_killed_and_restarted_from_its_checkpoint(
    cluster: LocalCluster, stack: Stack, tmp_path: Path
) -> None:
    stack.messaging.create_topic(SRC)
    stack.messaging.create_topic(DST)
    sent: list[str] = []

    def publish(prefix: str, rounds: int) -> None:
        for r in range(rounds):
            batch = [f"{prefix}{r}-{i}" for i in range(10)]
            stack.messaging.publish(SRC, batch)
            sent.extend(batch)

    checkpoint, stop = str(tmp_path / "checkpoint"), tmp_path / "stop"
    args = ("stream", stack.url, stack.tx_address, "src", "dst", checkpoint, str(stop))
    publish("a", 5)
    first = submit(cluster, tmp_path / "first.log", *args)
    try:
        eventually(lambda: len(payloads(stack, DST)) >= 10, "the first query's output")
        publish("b", 5)  # while it runs: it is killed somewhere in the middle of these
        time.sleep(0.5)
    finally:
        kill(first)
    publish("c", 3)  # while it is down

    second = submit(cluster, tmp_path / "second.log", *args)
    try:
        eventually(lambda: len(payloads(stack, DST)) >= len(sent), "the restarted query's output")
        stop.touch()
        finish(second, tmp_path / "second.log")
    finally:
        kill(second)
    assert payloads(stack, DST) == [f"{p}!" for p in sent]  # exactly once, in order


def test_a_restart_with_a_fresh_checkpoint_drops_nothing(
    cluster: LocalCluster, stack: Stack, tmp_path: Path
) -> None:
    stack.messaging.create_topic(SRC)
    stack.messaging.create_topic(DST)
    log = tmp_path / "driver.log"
    args = ("fresh", stack.url, stack.tx_address, "src", "dst", str(tmp_path / "checkpoint"))
    assert "DONE" in finish(submit(cluster, log, *args), log)
    expected = [f"{run}{r}-{i}!" for run in ("first", "second") for r in range(2) for i in range(5)]
    assert payloads(stack, DST) == expected  # the second run's batches 0.. were not dropped


def apps(cluster: LocalCluster) -> set[str]:
    """The applications the Workers have run executors for."""
    dirs = [cluster.root / f"work{i}" for i in range(cluster.workers)]
    return {app.name for d in dirs for app in d.glob("app-*")}


def test_spark_submit_of_the_example(cluster: LocalCluster, stack: Stack, tmp_path: Path) -> None:
    before = apps(cluster)
    log = tmp_path / "example.log"
    with log.open("wb") as out:
        driver = cluster.submit(
            EXAMPLE,
            ["--url", stack.url, "--tx-server", stack.tx_address, "--runs", "40"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    text = finish(driver, log)
    assert "summaries committed to demo:program_summaries" in text
    assert apps(cluster) - before  # its executors ran on the cluster's Workers
    published = example.committed(stack.messaging, stack.tx, example.SUMMARIES)
    assert sorted(s["program"] for s in published) == sorted(example.PROGRAMS)
    assert sum(s["runs"] for s in published) == 40  # all in one commit; the open run not counted
    assert all(s["completed"] + s["failed"] == s["runs"] for s in published)
