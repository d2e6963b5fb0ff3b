"""What the stored bytes mean: the newest readable snapshot plus the logs since it.

Recovery reads the newest snapshot that decodes (an unreadable newest snapshot falls back
to the one before: the logs since every retained snapshot are kept) and replays every log
whose timestamp is at or after the snapshot's, in ascending order.

Logs are read by ``txn.persist.log_codec.LogReader``: a torn tail (the end of a write
that a crash interrupted before its sync) is dropped and the file is cut back to its last
whole batch (our framed logs) or record (Tephra's). Anything else that does not check out
is corruption and stops recovery with ``CorruptStateError`` naming the file and offset:
skipping it could lose committed transactions and make aborted data visible.

Snapshots we write carry a CRC32C trailer (``txn.persist.snapshot_codec.seal_snapshot``);
one that fails it, or does not decode exactly, is never half-read: recovery falls back to
the snapshot before it (whose logs are retained). If snapshots exist but none is
readable, recovery stops with ``CorruptStateError`` instead of starting from the logs
alone, which would lose everything before them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from txn.errors import CodecError, CorruptStateError
from txn.persist.edit import TransactionEdit
from txn.persist.log_codec import CorruptLogError, LogReader
from txn.persist.snapshot_codec import (
    decode_snapshot,
    encode_snapshot,
    seal_snapshot,
    unseal_snapshot,
)
from txn.persist.storage import LogWriter, StateStorage
from txn.state import TransactionSnapshot

__all__ = ["TransactionStateStore"]

log = logging.getLogger(__name__)


class TransactionStateStore:
    """Snapshots and logs of one manager, on top of a byte-level ``StateStorage``."""

    def __init__(self, storage: StateStorage) -> None:
        self.storage = storage

    @property
    def location(self) -> str:
        return self.storage.location

    def open(self) -> None:
        self.storage.open()

    def close(self) -> None:
        self.storage.close()

    # -- snapshots --------------------------------------------------------------------

    def latest_snapshot(self) -> TransactionSnapshot | None:
        """The newest snapshot that checks out and decodes, or None when there is none.

        Raises ``CorruptStateError`` when snapshots exist but none is readable."""
        stamps = self.storage.list_snapshots()
        for ts in reversed(stamps):
            try:
                return decode_snapshot(unseal_snapshot(self.storage.read_snapshot(ts)))
            except CodecError as exc:
                log.error(
                    "snapshot %s in %s is unreadable (%s); falling back to an older one",
                    ts,
                    self.location,
                    exc,
                )
        if stamps:
            raise CorruptStateError(
                f"no snapshot in {self.location} is readable ({len(stamps)} found); "
                "refusing to start from the logs alone"
            )
        return None

    def write_snapshot(self, snapshot: TransactionSnapshot) -> None:
        self.storage.write_snapshot(snapshot.timestamp_ms, seal_snapshot(encode_snapshot(snapshot)))

    def delete_old_snapshots(self, keep: int) -> int:
        """Keep the newest ``keep`` (at least 1) snapshots; return the oldest kept
        timestamp, or -1 when there are none."""
        stamps = self.storage.list_snapshots()
        if not stamps:
            return -1
        keep = max(1, keep)
        for ts in stamps[:-keep]:
            self.storage.delete_snapshot(ts)
        return stamps[-keep:][0]

    # -- logs -------------------------------------------------------------------------

    def create_log(self, timestamp_ms: int) -> LogWriter:
        return self.storage.create_log(timestamp_ms)

    def log_timestamps(self) -> list[int]:
        return self.storage.list_logs()

    def delete_logs_older_than(self, timestamp_ms: int) -> None:
        for ts in self.storage.list_logs():
            if ts < timestamp_ms:
                self.storage.delete_log(ts)

    def edits_since(self, timestamp_ms: int) -> Iterator[TransactionEdit]:
        """Every edit of the logs with timestamp ``>= timestamp_ms``, in log order.

        Repairs torn tails (see the module docstring) as it goes.
        """
        for ts in self.storage.list_logs():
            if ts >= timestamp_ms:
                yield from self._read_log(ts)

    def _read_log(self, ts: int) -> Iterator[TransactionEdit]:
        with self.storage.read_log(ts) as buf:
            size = len(buf)
            reader = LogReader(buf)
            try:
                yield from reader
            except CorruptLogError as exc:
                raise CorruptStateError(
                    f"log txlog.{ts} in {self.location} is corrupt at byte {exc.offset} "
                    f"of {size}: {exc}"
                ) from exc
        torn_at = reader.torn_at
        if torn_at is not None:
            log.warning(
                "log %s in %s ends with a torn record: dropping %d bytes after byte %d",
                ts,
                self.location,
                size - torn_at,
                torn_at,
            )
            self.storage.truncate_log(ts, torn_at)
