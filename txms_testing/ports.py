"""Loopback ports for engines that cannot bind port 0 themselves (ZooKeeper needs its
ports in its configuration before it starts).

A port is found by binding 127.0.0.1:0 and releasing it: free a moment ago, but another
process may take it before the engine binds it. Callers retry a start that failed on a
clash (``ZooKeeperEnsemble`` does, with new ports).
"""

from __future__ import annotations

import contextlib
import socket
import time

__all__ = ["free_port", "free_ports", "wait_for_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1, all free a moment ago (held open
    together while they are picked, so they differ)."""
    probes: list[socket.socket] = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probes.append(probe)
            probe.bind(("127.0.0.1", 0))
        return [int(p.getsockname()[1]) for p in probes]
    finally:
        for probe in probes:
            probe.close()


def wait_for_port(port: int, deadline: float, host: str = "127.0.0.1") -> bool:
    """Whether a TCP connection to ``host:port`` succeeds before ``deadline``
    (``time.monotonic()``)."""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return True
        time.sleep(0.05)
    return False
