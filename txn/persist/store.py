"""What the stored bytes mean: the newest readable snapshot plus the logs since it.

Recovery reads the newest snapshot that decodes (an unreadable newest snapshot falls back
to the one before: the logs since every retained snapshot are kept) and replays every log
whose timestamp is at or after the snapshot's, in ascending order.

A torn last record — a record cut short by the end of the file, or a tail of zero bytes
that a crash left behind — is dropped and the file is cut back to its last whole record.
Any other undecodable record is corruption and stops recovery with ``CorruptStateError``
naming the file and offset: silently skipping it could lose committed transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from txn.errors import CodecError, CorruptStateError
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import TruncatedRecordError, decode_record
from txn.persist.snapshot_codec import decode_snapshot, encode_snapshot
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
        """The newest snapshot that decodes, or None when there is none."""
        for ts in reversed(self.storage.list_snapshots()):
            try:
                return decode_snapshot(self.storage.read_snapshot(ts))
            except CodecError as exc:
                log.error(
                    "snapshot %s in %s is unreadable (%s); falling back to an older one",
                    ts,
                    self.location,
                    exc,
                )
        return None

    def write_snapshot(self, snapshot: TransactionSnapshot) -> None:
        self.storage.write_snapshot(snapshot.timestamp_ms, encode_snapshot(snapshot))

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
        torn_at: int | None = None
        with self.storage.read_log(ts) as buf:
            size = len(buf)
            pos = 0
            while pos < size:
                try:
                    _seq, edit, end = decode_record(buf, pos)
                except TruncatedRecordError:
                    torn_at = pos
                    break
                except CodecError as exc:
                    if not any(buf[pos:size]):
                        torn_at = pos
                        break
                    raise CorruptStateError(
                        f"log {ts} in {self.location} is corrupt at byte {pos} of {size}: {exc}"
                    ) from exc
                yield edit
                pos = end
        if torn_at is not None:
            log.warning(
                "log %s in %s ends with a torn record: dropping %d bytes after byte %d",
                ts,
                self.location,
                size - torn_at,
                torn_at,
            )
            self.storage.truncate_log(ts, torn_at)
