"""Cost of the log's checksums on the write path: CRC32C implementations on batch-sized
inputs, and framing a typical group-commit batch against writing its records bare.

    python -m benchmarks.log_checksum_bench

Prints one line per measurement (microseconds per call, best of 5 repeats). A
measurement, not a test.
"""

from __future__ import annotations

import os
import sys
import timeit
import zlib

import google_crc32c

from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_record
from txn.persist.log_codec import encode_frames
from txn.transaction import TransactionType

_POLY = 0x82F63B78


def _table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def table_crc32c(data: bytes) -> int:
    """CRC32C, table-driven, in Python (the alternative to a C library)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _us(fn: object, number: int) -> float:
    timer = timeit.Timer(fn)  # type: ignore[arg-type]
    return min(timer.repeat(5, number)) / number * 1e6


def main() -> int:
    assert table_crc32c(b"123456789") == google_crc32c.value(b"123456789") == 0xE3069283
    for size in (100, 700, 16_000):
        data = os.urandom(size)
        n = max(10, 200_000 // size)
        google = _us(lambda d=data: google_crc32c.value(d), n)
        plain = _us(lambda d=data: zlib.crc32(d), n)
        table = _us(lambda d=data: table_crc32c(d), max(1, n // 200))
        print(
            f"{size:>6} bytes  google-crc32c {google:8.2f} us  zlib.crc32 (not CRC32C)"
            f" {plain:8.2f} us  table-driven Python {table:9.2f} us"
        )
    # A 16-client batch: 8 edits of each kind a cycle writes
    edits = []
    for i in range(8):
        wp = 1_700_000_000_000_000_000 + i
        edits += [
            TransactionEdit.started(wp, wp - 1, 1_700_000_030_000, TransactionType.SHORT),
            TransactionEdit.committing(wp, frozenset({b"key-%012d" % i})),
        ]
    records = [encode_record(i, e) for i, e in enumerate(edits)]
    size = sum(map(len, records))
    bare = _us(lambda: b"".join(records), 20_000)
    framed = _us(lambda: encode_frames(records, 4096), 20_000)
    encode = _us(lambda: [encode_record(i, e) for i, e in enumerate(edits)], 2_000)
    print(
        f"batch of {len(edits)} edits ({size} bytes): encoding the records {encode:.2f} us;"
        f" joining them bare {bare:.2f} us, framed with CRC32C {framed:.2f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
