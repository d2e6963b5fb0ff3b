"""``SyncHelper``: a real helper process syncing real files; its failures and death are
reported as storage failures, never as a successful sync."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from txn.errors import TxStorageError
from txn.persist.syncer import SyncHelper


@pytest.fixture
def helper() -> Iterator[SyncHelper]:
    h = SyncHelper()
    yield h
    h.close()


def test_syncs_a_file_and_answers_through_its_socket(helper: SyncHelper, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(3):
            os.write(fd, b"edit %d\n" % i)
            helper.request(fd)
            poller = select.poll()  # not select(): the suite may hold more than 1024 fds
            poller.register(helper.fileno(), select.POLLIN)
            assert poller.poll(10_000), "no answer from the helper"
            assert helper.result() is None
        helper.sync(fd)  # the blocking form
    finally:
        os.close(fd)
    assert (tmp_path / "log").read_bytes() == b"edit 0\nedit 1\nedit 2\n"


def test_one_request_at_a_time(helper: SyncHelper, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        helper.request(fd)
        with pytest.raises(RuntimeError):
            helper.request(fd)
        assert helper.result() is None
    finally:
        os.close(fd)


def test_a_failing_fdatasync_is_reported(helper: SyncHelper) -> None:
    read_end, write_end = os.pipe()  # fdatasync on a pipe fails with EINVAL
    try:
        with pytest.raises(TxStorageError, match="cannot sync the log"):
            helper.sync(read_end)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_dead_helper_is_a_failure_not_a_sync(helper: SyncHelper, tmp_path: Path) -> None:
    os.kill(helper._proc.pid, signal.SIGKILL)
    helper._proc.wait(10)
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(TxStorageError, match="helper"):
            helper.sync(fd)
    finally:
        os.close(fd)


def test_the_helper_exits_when_its_owner_closes() -> None:
    h = SyncHelper()
    proc = h._proc
    h.close()
    assert proc.returncode == 0


def test_a_ctrl_c_is_left_to_the_owner(helper: SyncHelper, tmp_path: Path) -> None:
    # Ctrl-C signals the whole process group; the owner drains and then closes the helper
    # (end-of-file), which must still be there to sync the last batch.
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        helper.sync(fd)  # the helper is up and serving
        os.kill(helper._proc.pid, signal.SIGINT)
        os.write(fd, b"last")
        helper.sync(fd)
    finally:
        os.close(fd)
    assert helper._proc.poll() is None
