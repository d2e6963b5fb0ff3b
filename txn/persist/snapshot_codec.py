"""Byte codec of ``TransactionSnapshot`` (pure), compatible with Tephra's snapshot codecs.

A snapshot is a zig-zag varint ``int version`` followed by the body of that version, in
Avro's binary style: longs and ints as zig-zag varints, byte strings as length + bytes,
collections as blocks (``count items ... 0``; an empty collection is a single ``0``)::

    long timestamp, long readPointer, long writePointer
    invalid:    block of long
    inProgress: block of (long txId, long expiration, long visibilityUpperBound
                          [V2+: int typeOrdinal] [V4: block of long checkpoints])
    committing: block of (long txId, block of bytes)
    committed:  block of (long commitPointer, block of bytes)

Versions 2 and 3 share a layout. We write version 4 with every collection in ascending
order, so equal states encode to equal bytes. Version-1 entries decode with type
``None``; ``txn.state.resolve_legacy_types`` assigns one. A snapshot must decode exactly:
bytes left over are an error.

Snapshot *files* we write are sealed: the encoded snapshot, then a 12-byte trailer
``crc32c(body) u32 BE`` + ``b"TXMSCRC1"``, so damage anywhere is detected instead of
decoding to a different state. Tephra's snapshot readers stop at the end of the body and
ignore the trailer; Tephra's own files have none and are read as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from txn.errors import CodecError
from txn.persist.checksum import crc32c
from txn.persist.edit_codec import sorted_keys
from txn.state import InProgressTx, InProgressType, TransactionSnapshot

__all__ = [
    "CURRENT_VERSION",
    "decode_snapshot",
    "decode_visibility_state",
    "encode_snapshot",
    "read_varint",
    "seal_snapshot",
    "unseal_snapshot",
    "write_varint",
]

CURRENT_VERSION = 4
SEAL_MAGIC = b"TXMSCRC1"
_SEAL_SIZE = 4 + len(SEAL_MAGIC)
_TYPES = {t.value: t for t in InProgressType}


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zig-zag varint (Avro ``writeInt``/``writeLong``)."""
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read one zig-zag varint at ``pos``; return (value, next position)."""
    shift = 0
    n = 0
    while True:
        if pos >= len(buf):
            raise CodecError("snapshot truncated inside a varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CodecError("varint longer than 10 bytes")
    return (n >> 1) ^ -(n & 1), pos


def _write_block(out: bytearray, count: int) -> bool:
    """Write a block header; return whether items follow (and a 0 must close it)."""
    write_varint(out, count)
    return count > 0


def _write_longs(out: bytearray, values: Iterable[int]) -> None:
    items = list(values)
    if _write_block(out, len(items)):
        for v in items:
            write_varint(out, v)
        write_varint(out, 0)


def _write_change_sets(out: bytearray, sets: Iterable[tuple[int, frozenset[bytes]]]) -> None:
    items = sorted(sets)
    if _write_block(out, len(items)):
        for key, changes in items:
            write_varint(out, key)
            if _write_block(out, len(changes)):
                for change in sorted_keys(changes):
                    write_varint(out, len(change))
                    out += change
                write_varint(out, 0)
        write_varint(out, 0)


def encode_snapshot(snapshot: TransactionSnapshot) -> bytes:
    """Encode with the version-4 codec, version number first."""
    out = bytearray()
    write_varint(out, CURRENT_VERSION)
    write_varint(out, snapshot.timestamp_ms)
    write_varint(out, snapshot.read_pointer)
    write_varint(out, snapshot.write_pointer)
    _write_longs(out, sorted(snapshot.invalid))
    entries = sorted(snapshot.in_progress.items())
    if _write_block(out, len(entries)):
        for wp, entry in entries:
            if entry.type is None:
                raise CodecError(f"in-progress entry {wp} has no type; resolve it first")
            write_varint(out, wp)
            write_varint(out, entry.expiration_ms)
            write_varint(out, entry.visibility_upper_bound)
            write_varint(out, entry.type.value)
            _write_longs(out, entry.checkpoint_write_pointers)
        write_varint(out, 0)
    _write_change_sets(out, snapshot.committing.items())
    _write_change_sets(out, snapshot.committed.items())
    return bytes(out)


class _Decoder:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def long(self) -> int:
        value, self.pos = read_varint(self.buf, self.pos)
        return value

    def blocks(self) -> Iterable[int]:
        """Yield once per item across all blocks of a collection."""
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:
                raise CodecError("negative block counts are not supported")
            for _ in range(count):
                yield count

    def raw(self) -> bytes:
        n = self.long()
        if n < 0 or self.pos + n > len(self.buf):
            raise CodecError(f"bad byte-string length {n}")
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data

    def longs(self) -> tuple[int, ...]:
        return tuple(self.long() for _ in self.blocks())

    def change_sets(self) -> dict[int, frozenset[bytes]]:
        result: dict[int, frozenset[bytes]] = {}
        for _ in self.blocks():
            key = self.long()
            result[key] = frozenset(self.raw() for _ in self.blocks())
        return dict(sorted(result.items()))


def _decode_head(
    data: bytes,
) -> tuple[_Decoder, int, int, int, int, tuple[int, ...], dict[int, InProgressTx]]:
    d = _Decoder(bytes(data))
    version = d.long()
    if version not in (1, 2, 3, 4):
        raise CodecError(f"Version {version} of snapshot encoding is not supported")
    timestamp, read_pointer, write_pointer = d.long(), d.long(), d.long()
    invalid = tuple(sorted(d.longs()))
    in_progress: dict[int, InProgressTx] = {}
    for _ in d.blocks():
        wp, expiration, vub = d.long(), d.long(), d.long()
        tx_type: InProgressType | None = None
        if version >= 2:
            ordinal = d.long()
            tx_type = _TYPES.get(ordinal)
            if tx_type is None:
                raise CodecError(f"in-progress type ordinal {ordinal} out of range")
        checkpoints = d.longs() if version >= 4 else ()
        in_progress[wp] = InProgressTx(vub, expiration, tx_type, checkpoints)
    in_progress = dict(sorted(in_progress.items()))
    return d, version, timestamp, read_pointer, write_pointer, invalid, in_progress


def seal_snapshot(body: bytes) -> bytes:
    """A snapshot file's bytes: ``body`` and its checksum trailer."""
    return body + crc32c(body).to_bytes(4, "big") + SEAL_MAGIC


def unseal_snapshot(data: bytes) -> bytes:
    """The snapshot in a file's bytes: checked against its trailer when it has one (ours),
    as it is otherwise (Tephra's). Raises ``CodecError`` on a checksum mismatch."""
    if len(data) < _SEAL_SIZE or data[-len(SEAL_MAGIC) :] != SEAL_MAGIC:
        return data
    body = data[:-_SEAL_SIZE]
    expected = int.from_bytes(data[-_SEAL_SIZE : -len(SEAL_MAGIC)], "big")
    if crc32c(bytes(body)) != expected:
        raise CodecError("snapshot checksum mismatch: the file is damaged")
    return body


def decode_snapshot(data: bytes) -> TransactionSnapshot:
    """Decode a snapshot of any version 1-4; raise ``CodecError`` if malformed or if
    bytes are left over."""
    d, _version, timestamp, rp, wp, invalid, in_progress = _decode_head(data)
    committing = d.change_sets()
    committed = d.change_sets()
    if d.pos != len(d.buf):
        raise CodecError(f"{len(d.buf) - d.pos} bytes after the end of the snapshot")
    return TransactionSnapshot(
        timestamp_ms=timestamp,
        read_pointer=rp,
        write_pointer=wp,
        invalid=invalid,
        in_progress=in_progress,
        committing=committing,
        committed=committed,
    )


def decode_visibility_state(data: bytes) -> TransactionSnapshot:
    """Decode only pointers, invalid list and in-progress entries (the change sets are
    left empty and not read, so a damaged tail does not matter)."""
    _d, _version, timestamp, rp, wp, invalid, in_progress = _decode_head(data)
    return TransactionSnapshot(
        timestamp_ms=timestamp,
        read_pointer=rp,
        write_pointer=wp,
        invalid=invalid,
        in_progress=in_progress,
        committing={},
        committed={},
    )
