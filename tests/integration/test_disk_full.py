"""``tms serve`` through a disk-full episode, then restarted (SIGTERM and kill -9): every
message acknowledged with 200 — before, during and after the episode — is there after the
restart, exactly once and in order; while the disk is full, publishes and polls answer
503 ``storage_unavailable``. Faults are real: a full tmpfs, or ENOSPC injected into the
server's write/fdatasync calls (``tests.diskfaults``)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.diskfaults import ShimDisk, TmpfsDisk, disk
from tests.integration.procs import TmsServeProcess
from tms.client import MessagingClient
from tms.errors import StorageUnavailableError, TopicNotFoundError
from tms.model import TopicId

T = TopicId("ns", "full")
R = TypeVar("R")
_PAD = b"x" * 2000


def _payload(i: int) -> bytes:
    return b"%d/" % i + _PAD


def _index(payload: bytes) -> int:
    return int(payload.split(b"/", 1)[0])


def _once_reopened(call: Callable[[], R]) -> R:
    """``call()``, repeated while the store answers 503 (it is being reopened)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return call()
        except StorageUnavailableError:
            assert time.monotonic() < deadline, "the store did not come back"
            time.sleep(0.1)


@pytest.mark.parametrize("kind", ["tmpfs", "shim"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_acknowledged_messages_survive_a_full_disk(tmp_path: Path, kind: str, stop: int) -> None:
    with disk(kind, tmp_path) as d:
        serve = TmsServeProcess(d.data, env=d.env())
        try:
            _episode(serve, d, stop)
        finally:
            serve.kill_if_running()


def _episode(serve: TmsServeProcess, d: TmpfsDisk | ShimDisk, stop: int) -> None:
    url = serve.start()
    client = MessagingClient(url, retries=0)
    client.create_topic(T)
    acked: list[int] = []
    sent = 0

    def publish() -> bool:
        nonlocal sent
        sent += 1
        try:
            client.publish(T, [_payload(sent)])
        except StorageUnavailableError:
            return False
        acked.append(sent)
        return True

    # Given messages published before the disk fills
    for _ in range(20):
        assert publish()
    # When the disk is full, publishes answer 503
    d.fill()
    refused = sum(not publish() for _ in range(200))
    assert refused >= 190, "the full disk was not noticed"
    # And when space is freed, publishing works again (after the store reopened)
    d.free()
    deadline = time.monotonic() + 30
    while not publish():  # (counting every attempt)
        assert time.monotonic() < deadline, "publishing did not resume after space was freed"
        time.sleep(0.1)
    for _ in range(100):
        assert publish()
    seen_before = [_index(m.payload) for m in client.poll(T).messages]
    client.close()
    # Then after a restart every acknowledged message is there, once, in order
    serve.stop(stop)
    url = serve.start()
    client = MessagingClient(url, retries=0)
    try:
        found = [_index(m.payload) for m in client.poll(T).messages]
    finally:
        client.close()
    assert found == sorted(found) and len(found) == len(set(found)), "order or duplicates"
    missing = sorted(set(acked) - set(found))
    assert not missing, f"{len(missing)} acknowledged messages lost, from {missing[0]}"
    assert found[: len(seen_before)] == seen_before  # nothing a consumer saw went away
    assert serve.stop(signal.SIGTERM) == 0


@contextlib.contextmanager
def _served_on_shim(tmp_path: Path) -> Iterator[tuple[ShimDisk, MessagingClient]]:
    """``tms serve`` on a directory with injectable ENOSPC, the topic made, message 1 in
    it; stopped with SIGTERM (exit 0) at the end."""
    with disk("shim", tmp_path) as d:
        assert isinstance(d, ShimDisk)
        serve = TmsServeProcess(d.data, env=d.env())
        try:
            with MessagingClient(serve.start(), retries=0) as client:
                client.create_topic(T)
                client.publish(T, [_payload(1)])
                yield d, client
            assert serve.stop(signal.SIGTERM) == 0
        finally:
            serve.kill_if_running()


def test_reads_answer_503_while_the_store_is_down(tmp_path: Path) -> None:
    with _served_on_shim(tmp_path) as (d, client):
        # Given a write that failed on a full disk
        d.fill()
        with pytest.raises(StorageUnavailableError):
            client.publish(T, [_payload(2)])
        # Then reads answer 503 too, until the store could be reopened
        with pytest.raises(StorageUnavailableError):
            client.poll(T)
        d.free()
        messages = _once_reopened(lambda: client.poll(T).messages)
        assert [_index(m.payload) for m in messages] == [1]


def test_a_write_whose_sync_failed_may_land_and_is_then_read_again(tmp_path: Path) -> None:
    with _served_on_shim(tmp_path) as (d, client):
        # Given a topic delete whose bytes reached the log but whose sync failed
        d.fail_syncs()
        with pytest.raises(StorageUnavailableError):
            client.delete_topic(T)
        d.free()
        # When the store has reopened: LevelDB replayed the delete after all, so the
        # service must not acknowledge into the deleted topic
        with pytest.raises(TopicNotFoundError):
            _once_reopened(lambda: client.publish(T, [_payload(2)]))
        client.create_topic(T)
        client.publish(T, [_payload(3)])
        assert [_index(m.payload) for m in client.poll(T).messages] == [3]
