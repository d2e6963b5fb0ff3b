"""Byte codec of the transaction-log files (pure): our framed format, and Tephra's.

A Tephra local log is a bare sequence of records (an 8-byte big-endian sequence number and
a ``TransactionEdit``, ``txn.persist.edit_codec``). Nothing in it tells a record cut short
by a crash from a damaged length in the middle of the file, so one bad byte reads like a
torn tail and everything after it would be dropped. The logs we write are therefore
*framed* (format version 1)::

    file header   8 bytes   b"TXMSLOG" + version 0x01
    frame         header (24 bytes) + payload, one per group-commit batch:
      magic        4 bytes  b"\\xf1TXB"
      length       u32      payload bytes
      synced       u64      bytes of this file that were durable when the frame was written
      payload_crc  u32      CRC32C (Castagnoli) of the payload
      header_crc   u32      CRC32C of the 20 header bytes before it
      payload      Tephra's records, sequence numbers continuing across frames

All integers are big-endian. A Tephra log starts with the sequence number 0 of its first
record, so its first byte is 0; ours starts with ``T``. Both are read.

Reading a framed log (``LogReader``): a frame that is whole and checks out is replayed. At
the first frame that does not (bad header, bad checksum, or cut short by the end of the
file) the reader decides between a **torn tail** — the end of a write that a crash
interrupted before its sync completed: dropped, the file is to be cut back there — and
**corruption**, which stops recovery (``CorruptLogError`` with the offset). The damage is
corruption when a later whole frame says (``synced``) that the damaged bytes had been
made durable before it was written: acknowledged data was lost. Otherwise nothing at or
after the damage was ever acknowledged (an acknowledged batch has been synced, and a sync
covers the whole file), so dropping it loses nothing. A frame whose header checks out is
skipped as a whole when looking for later frames, so bytes inside its payload (change
keys a client chose) are never taken for a frame.

Tephra-format logs keep the old rule: a record cut short by the end of the file, or a tail
of zero bytes, is torn; any other undecodable record is corruption.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from txn.errors import CodecError
from txn.persist.checksum import crc32c
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import TruncatedRecordError, decode_record, encode_record

__all__ = [
    "FILE_HEADER",
    "FRAME_HEADER_SIZE",
    "FRAME_MAGIC",
    "MAX_FRAME_PAYLOAD",
    "CorruptLogError",
    "LogReader",
    "crc32c",
    "encode_frame",
    "encode_frames",
    "encode_log",
]

FILE_HEADER = b"TXMSLOG\x01"
FRAME_MAGIC = b"\xf1TXB"
_HEAD = struct.Struct(">4sIQI")  # magic, length, synced, payload crc
_CRC = struct.Struct(">I")
FRAME_HEADER_SIZE = _HEAD.size + _CRC.size
MAX_FRAME_PAYLOAD = 64 * 1024 * 1024
"""Batches larger than this are written as several frames."""


class CorruptLogError(CodecError):
    """Damage in a log that is not a torn tail; ``offset`` is where it starts."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset


def encode_frame(payload: bytes, synced: int) -> bytes:
    """One frame around ``payload`` (whole records)."""
    head = _HEAD.pack(FRAME_MAGIC, len(payload), synced, crc32c(payload))
    return head + _CRC.pack(crc32c(head)) + payload


def encode_frames(
    records: list[bytes], synced: int, *, max_payload: int = MAX_FRAME_PAYLOAD
) -> bytes:
    """Frames holding ``records`` in order, none with a payload above ``max_payload``
    (unless a single record is larger)."""
    frames = []
    chunk: list[bytes] = []
    size = 0
    for record in records:
        if chunk and size + len(record) > max_payload:
            frames.append(encode_frame(b"".join(chunk), synced))
            chunk, size = [], 0
        chunk.append(record)
        size += len(record)
    if chunk:
        frames.append(encode_frame(b"".join(chunk), synced))
    return b"".join(frames)


def encode_log(edits: list[TransactionEdit]) -> bytes:
    """A whole framed log file holding ``edits`` in one frame (tests, tools)."""
    records = [encode_record(i, e) for i, e in enumerate(edits)]
    return FILE_HEADER + (encode_frames(records, 0) if records else b"")


@dataclass(frozen=True, slots=True)
class _Frame:
    start: int
    end: int
    synced: int
    payload: bytes


class LogReader:
    """The edits of one log file, in order (see the module docstring).

    Iterate once; afterwards ``torn_at`` is the offset where a torn tail starts (the file
    should be cut back to it), or None. ``framed`` tells the format. Raises
    ``CorruptLogError`` for corruption.
    """

    def __init__(self, buf: bytes) -> None:
        self._buf = buf
        self.torn_at: int | None = None
        self.framed = buf[: len(FILE_HEADER)] == FILE_HEADER

    def __iter__(self) -> Iterator[TransactionEdit]:
        buf = self._buf
        if self.framed:
            yield from self._framed()
        elif len(buf) < len(FILE_HEADER) and (FILE_HEADER.startswith(bytes(buf)) or not any(buf)):
            if buf:
                self.torn_at = 0  # a header (or the first record) cut short
        else:
            yield from self._tephra()

    # -- our format -------------------------------------------------------------------

    def _framed(self) -> Iterator[TransactionEdit]:
        buf = self._buf
        size = len(buf)
        pos = len(FILE_HEADER)
        while pos < size:
            frame, reason, skip_to = self._frame_at(pos)
            if frame is None:
                proof = self._durable_frame_after(pos, skip_to)
                if proof is not None:
                    raise CorruptLogError(
                        pos,
                        f"damaged frame at byte {pos} ({reason}), but the frame at byte "
                        f"{proof} says the file was durable past it",
                    )
                self.torn_at = pos
                return
            yield from self._records(frame)
            pos = frame.end

    def _frame_at(self, pos: int) -> tuple[_Frame | None, str, int]:
        """The whole, checked frame at ``pos``, else (None, why, where a later frame
        could start: after this one's payload when its header is sound)."""
        buf = self._buf
        size = len(buf)
        if pos + FRAME_HEADER_SIZE > size:
            return None, "cut short by the end of the file", pos + 1
        head = bytes(buf[pos : pos + _HEAD.size])
        magic, length, synced, payload_crc = _HEAD.unpack(head)
        (header_crc,) = _CRC.unpack_from(buf, pos + _HEAD.size)
        if magic != FRAME_MAGIC or crc32c(head) != header_crc:
            return None, "bad frame header", pos + 1
        start = pos + FRAME_HEADER_SIZE
        end = start + length
        if end > size:
            return None, "cut short by the end of the file", end
        payload = bytes(buf[start:end])
        if crc32c(payload) != payload_crc:
            return None, "payload checksum mismatch", end
        return _Frame(pos, end, synced, payload), "", end

    def _durable_frame_after(self, damaged: int, search_from: int) -> int | None:
        """A whole frame at or after ``search_from`` whose ``synced`` reaches past
        ``damaged``; None when there is none."""
        buf = self._buf
        at = search_from
        while True:
            at = buf.find(FRAME_MAGIC, at)
            if at < 0:
                return None
            frame, _reason, _skip = self._frame_at(at)
            if frame is None:
                at += 1
                continue
            if frame.synced > damaged:
                return at
            at = frame.end

    def _records(self, frame: _Frame) -> Iterator[TransactionEdit]:
        payload = frame.payload
        pos = 0
        while pos < len(payload):
            try:
                _seq, edit, pos = decode_record(payload, pos)
            except CodecError as exc:
                offset = frame.start + FRAME_HEADER_SIZE + pos
                raise CorruptLogError(
                    offset, f"undecodable record at byte {offset} in a sound frame: {exc}"
                ) from exc
            yield edit

    # -- Tephra's format --------------------------------------------------------------

    def _tephra(self) -> Iterator[TransactionEdit]:
        buf = self._buf
        size = len(buf)
        pos = 0
        while pos < size:
            try:
                _seq, edit, end = decode_record(buf, pos)
            except TruncatedRecordError:
                self.torn_at = pos
                return
            except CodecError as exc:
                if not any(buf[pos:size]):
                    self.torn_at = pos
                    return
                raise CorruptLogError(pos, f"undecodable record at byte {pos}: {exc}") from exc
            yield edit
            pos = end
