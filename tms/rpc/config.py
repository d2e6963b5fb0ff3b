"""Configuration of the binary protocol's server: typed, validated, frozen, built once."""

from __future__ import annotations

from dataclasses import dataclass

from tms.errors import TmsInvalidArgumentError

__all__ = [
    "DEFAULT_RPC_PORT",
    "LOOP_READ_BYTES",
    "LOOP_READ_MESSAGES",
    "LOOP_READ_ROWS",
    "RpcConfig",
]

DEFAULT_RPC_PORT = 15167

LOOP_READ_BYTES = 256 * 1024
"""At most about this much of answer is read on the loop's thread by a woken poll (a
burst written while it waited answers in several polls rather than stall the loop)."""

LOOP_READ_MESSAGES = 100
"""A poll of at most this many messages is read on the loop's thread from its first read
(when the store's reads are local), up to ``LOOP_READ_BYTES``: for so small a read the hop
to a worker thread and back costs the server more CPU than the read itself
(docs/benchmarks.md). A subscription's poll too, unless its read would wait
(``tms.subnowait``; ``tms.rpc.subs``)."""

LOOP_READ_ROWS = 4096
"""At most about this many rows are passed by a read on the loop's thread (skipped ones
too: a rolled-back or invalid transaction's entries, expired messages); one that would
pass more is read again on a worker (``MessageFetcher.cut``)."""


@dataclass(frozen=True)
class RpcConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_RPC_PORT
    max_frame_bytes: int = 16 * 1024 * 1024
    """Longest frame accepted (a longer one closes its connection); a poll's answer is
    about half of this at most."""
    max_in_flight: int = 256
    """Requests of one connection in progress at once; the server reads no further from
    a connection at this limit until one of them is answered (back-pressure)."""
    idle_timeout_s: float = 75.0
    """A connection from which nothing (request or ping) has arrived for this long, with
    nothing in progress, is closed (GOAWAY ``idle_timeout``)."""
    handshake_timeout_s: float = 10.0
    """The hello must have been answered this long after the connection was accepted
    (the TLS handshake included)."""
    frame_timeout_s: float = 30.0
    """An unfinished frame must be complete this long after its first bytes arrived."""
    worker_threads: int = 16
    """Threads for reads (writes go to the service's group commit, on its own threads)."""
    max_wait_ms: int = 60_000
    """Longest long-poll."""
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise TmsInvalidArgumentError(f"bad port {self.port}")
        if self.max_frame_bytes < 4096 or self.max_frame_bytes >= 2**31:
            raise TmsInvalidArgumentError("max_frame_bytes must be in 4096..2^31-1")
        if self.max_in_flight < 1 or self.worker_threads < 1 or self.max_wait_ms < 0:
            raise TmsInvalidArgumentError("bad binary protocol settings")
        timeouts = (self.idle_timeout_s, self.handshake_timeout_s, self.frame_timeout_s)
        if not all(t > 0 for t in timeouts):
            raise TmsInvalidArgumentError("the timeouts must be positive")
        if self.tls_key_file is not None and self.tls_cert_file is None:
            raise TmsInvalidArgumentError("a TLS key needs its certificate (tls_cert_file)")

    @property
    def max_poll_bytes(self) -> int:
        """Bytes of answer one poll gives at most (at least one message)."""
        return self.max_frame_bytes // 2
