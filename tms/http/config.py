"""Configuration of the REST service: typed, validated, frozen, built once."""

from __future__ import annotations

from dataclasses import dataclass

from tms.errors import TmsInvalidArgumentError

__all__ = ["HttpConfig"]


@dataclass(frozen=True)
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 15166
    max_request_bytes: int = 10 * 1024 * 1024
    chunk_bytes: int = 60_000
    """Bytes of messages per streamed poll chunk (approximate; at least one message)."""
    chunk_messages: int = 5_000
    """Messages read from storage per step of a streamed poll."""
    worker_threads: int = 64
    max_wait_ms: int = 60_000
    idle_timeout_s: float = 75.0
    """A connection with no request in progress (kept alive, or never used) is closed
    after this long. Requests in progress, long polls included, are never cut."""
    header_timeout_s: float = 30.0
    """A request whose line and headers have not all arrived this long after its first
    byte is answered 408 and its connection closed (also the TLS handshake's limit)."""
    tls_cert_file: str | None = None
    """PEM certificate chain: with it the service speaks HTTPS only."""
    tls_key_file: str | None = None
    """PEM private key of the certificate (None: it is in ``tls_cert_file``)."""
    held_recheck_ms: int = 100
    """A long poll held behind a transaction in progress asks the transaction manager
    this often whether it finished, when no publisher said so (``tms.http.waiting``)."""
    held_watch_ms: int = 2
    """While any long poll is held, the service asks the transaction manager this often,
    in one call for all of them, whether the transactions they are held behind finished
    (``tms.http.waiting``; 0: only each poll's own ``held_recheck_ms``). Against a
    Tephra server without the ``writePointerState`` extension each question is a short
    transaction started and aborted (two log edits): set it higher there, or 0."""
    history_interval_s: float = 2.0
    """Seconds between samples of the metrics for the console's charts (0: none); the
    transaction manager is sampled every fifth."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise TmsInvalidArgumentError(f"bad port {self.port}")
        if self.max_request_bytes < 1024 or self.worker_threads < 1 or self.chunk_messages < 1:
            raise TmsInvalidArgumentError("bad HTTP settings")
        if self.held_recheck_ms < 1:
            raise TmsInvalidArgumentError("held_recheck_ms must be at least 1")
        if self.held_watch_ms < 0:
            raise TmsInvalidArgumentError("held_watch_ms must not be negative")
        if self.history_interval_s < 0:
            raise TmsInvalidArgumentError("history_interval_s must not be negative")
        if not (self.idle_timeout_s > 0 and self.header_timeout_s > 0):
            raise TmsInvalidArgumentError("idle_timeout_s and header_timeout_s must be positive")
        if self.tls_key_file is not None and self.tls_cert_file is None:
            raise TmsInvalidArgumentError("a TLS key needs its certificate (tls_cert_file)")

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert_file else "http"
