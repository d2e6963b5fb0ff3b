"""Batch writes when answers are lost, and jobs longer than their transaction's timeout,
with real Spark (``local[2]``) and the real servers; faults injected into the servers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack, running_stack
from tests.spark.test_write_read import committed, numbered, write
from tms.errors import StorageUnavailableError
from tms.model import TopicId
from tms.operations import Operation
from txn.config import TxConfig


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    # the manager invalidates timed-out transactions, as a real one does
    config = TxConfig(cleanup_interval_s=0.2, snapshot_interval_s=0)
    with running_stack(tmp_path, config) as running:
        yield running


def test_markers_without_an_answer_invalidate_the_job(
    spark: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = TopicId("default", "lost-markers")
    stack.messaging.create_topic(topic)
    real_submit = stack.service.submit_async
    written: list[Any] = []

    async def answer_lost(op: Operation[object]) -> object:
        result = await real_submit(op)
        if op.kind == "markers":
            written.append(result)  # the markers are in the topic; the answer never comes
            raise StorageUnavailableError("injected: the answer is lost")
        return result

    monkeypatch.setattr(stack.service, "submit_async", answer_lost)
    with pytest.raises(Exception, match="answer is lost"):
        write(stack, numbered(spark, 400), "lost-markers", txTimeoutS="600")
    assert written, "the fault was not injected"
    # the markers were written, and never become visible: the job was invalidated
    assert committed(stack, topic) == []
    assert stack.messaging.poll(topic).messages  # a non-transactional reader sees them
    pointer = written[0].details[0].tx_write_pointer
    probe = stack.tx.start_short()
    assert probe.is_invalid(pointer)


def test_a_commit_without_an_answer_that_happened_is_reported_done(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Python engine: the native server answers commits in C, past the injected fault.
    config = TxConfig(cleanup_interval_s=0.2, snapshot_interval_s=0, engine="python")
    with running_stack(tmp_path / "python", config) as stack:
        topic = TopicId("default", "lost-commit")
        stack.messaging.create_topic(topic)
        pipeline = stack.manager.pipeline
        real_commit = pipeline.commit
        lost: list[int] = []

        def commit_then_crash(tx_id: int, write_pointer: int) -> Any:
            done = real_commit(tx_id, write_pointer)
            if not lost:
                # Committed; the answer becomes an internal error, sent once everything
                # done so far (the commit) is durable.
                lost.append(tx_id)
                raise RuntimeError("injected: the connection dropped")
            return done

        monkeypatch.setattr(pipeline, "commit", commit_then_crash)
        write(stack, numbered(spark, 400), "lost-commit")  # no error: it did commit
        assert lost
        payloads = [p for _, p in committed(stack, topic)]
        assert sorted(payloads) == sorted(f"m{i}".encode() for i in range(400))


def test_a_job_longer_than_its_timeout_commits_while_its_driver_lives(
    spark: Any, stack: Stack
) -> None:
    topic = TopicId("default", "slow-job")
    stack.messaging.create_topic(topic)

    def slow(partition: int, attempt: int, row: int) -> None:
        if row == 0:
            time.sleep(4)  # 4 partitions on 2 threads: ~8 s, four times txTimeoutS

    write(stack, numbered(spark, 200, slow), "slow-job", txTimeoutS="2")
    assert len(committed(stack, topic)) == 200
