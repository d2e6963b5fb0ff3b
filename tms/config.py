"""Configuration of the messaging core: typed, validated, frozen, built once."""

from __future__ import annotations

from dataclasses import dataclass

from tms.errors import TmsInvalidArgumentError
from tms.model import DEFAULT_TTL_S

__all__ = ["TmsConfig"]


@dataclass(frozen=True)
class TmsConfig:
    default_ttl_s: int = DEFAULT_TTL_S
    """TTL of topics created without one."""
    tx_max_lifetime_s: int = 90_000
    """Transactional publish and store are refused once the transaction is older than
    this (it must match the transaction manager's ``max_lifetime_s``)."""
    cleanup_interval_s: float = 3600.0
    """How often cleanup runs in the background; <= 0 disables the thread."""
    cleanup_batch_rows: int = 10_000
    """Rows deleted or rewritten per synced write during cleanup."""
    cleanup_clock_skew_s: int = 3600
    """Allowance for the transaction server's clock running ahead of ours when looking
    for entries of invalid transactions."""
    cleanup_grace_s: int = 3600
    """Added to ``tx_max_lifetime_s`` before cleanup counts a transaction as unable to
    write (clock differences between this service and the transaction server)."""
    prune_participant: str = "tms"
    """The name cleanup reports its prune bound under to a transaction server in another
    process (``txn.prune``; it must be in the server's ``prune_participants``); empty:
    do not report."""
    tx_clock_skew_s: int = 60
    """Without a transaction service, transactional writes under a write pointer from
    later than the service's clock plus this are refused (``tms.guard.ClockGuard``)."""
    tx_state_cache_s: float = 1.0
    """With a transaction service, how long a read of its in-progress write pointers
    answers checks before it is read again (``tms.guard.TransactionStateGuard``)."""
    commit_later_ms: float = 5.0
    """A subscription commit answered before it is durable (a poll's ``commit_later``)
    is written this long after it was accepted, so that the commits of the polls that
    follow share its synced write (the latest record of each subscription is written)."""
    leveldb_write_buffer_mb: int = 64
    """LevelDB only (the embedded store): MiB of writes held in memory before they are
    flushed to a sorted file. Up to two buffers are in memory at once (one being
    flushed); after a crash, up to one buffer's worth of log is replayed at start.
    Larger buffers flush fewer, larger files, so concurrent writers' interleaved rows
    are rewritten less by compactions. 1 to 1024."""
    leveldb_block_cache_mb: int = 64
    """LevelDB only: MiB of uncompressed blocks cached for reads. 0 to 65536."""

    def __post_init__(self) -> None:
        if self.default_ttl_s <= 0 or self.tx_max_lifetime_s <= 0:
            raise TmsInvalidArgumentError("default_ttl_s and tx_max_lifetime_s must be positive")
        if (
            self.cleanup_batch_rows <= 0
            or self.cleanup_clock_skew_s < 0
            or self.cleanup_grace_s < 0
        ):
            raise TmsInvalidArgumentError("bad cleanup settings")
        if self.commit_later_ms < 0:
            raise TmsInvalidArgumentError("commit_later_ms must be >= 0")
        if self.tx_clock_skew_s < 0 or self.tx_state_cache_s < 0:
            raise TmsInvalidArgumentError("tx_clock_skew_s and tx_state_cache_s must be >= 0")
        if not _int_in(self.leveldb_write_buffer_mb, 1, 1024):
            raise TmsInvalidArgumentError(
                "leveldb_write_buffer_mb must be an integer from 1 to 1024"
            )
        if not _int_in(self.leveldb_block_cache_mb, 0, 65536):
            raise TmsInvalidArgumentError(
                "leveldb_block_cache_mb must be an integer from 0 to 65536"
            )

    def leveldb_options(self) -> dict[str, int]:
        """The keyword arguments of ``LevelDBStore`` these settings give."""
        return {
            "write_buffer_bytes": self.leveldb_write_buffer_mb << 20,
            "block_cache_bytes": self.leveldb_block_cache_mb << 20,
        }


def _int_in(value: object, low: int, high: int) -> bool:
    """An int (not a bool, not a float from a config file) in ``[low, high]``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
