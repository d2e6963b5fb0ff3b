"""A channel checks an idle connection for the server's close by ``poll``, so it still
does when the application holds more than 1024 descriptors (``select`` refuses those)."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest

from tms.client.channel import Channel

HIGH = 1100  # a descriptor number select() refuses


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HIGH + 64:
        pytest.fail(f"the hard limit on open files ({hard}) is below {HIGH + 64}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH + 64), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < HIGH:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_idle_channel_whose_server_closed_is_not_reused_above_fd_1023(many_fds: None) -> None:
    ours, theirs = socket.socketpair()
    assert ours.fileno() > 1023
    now = [100.0]
    channel = Channel(ours, ("127.0.0.1", 1), timeout_s=1.0, monotonic=lambda: now[0])
    try:
        now[0] += 2.0  # idle long enough to be checked
        assert channel.usable(max_idle_s=60.0)
        theirs.close()  # the server closes the idle connection
        assert not channel.usable(max_idle_s=60.0)
    finally:
        channel.close()
