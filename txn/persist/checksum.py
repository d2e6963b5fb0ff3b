"""CRC32C (Castagnoli), the checksum of our log frames and snapshot files.

``google-crc32c`` (Google's C library, hardware-accelerated): about 0.25 us for a
700-byte group-commit batch on the benchmark VM, against 70 us for a table-driven
implementation in Python (docs/benchmarks.md, "Log checksums").
"""

from __future__ import annotations

from google_crc32c import value as _value

__all__ = ["crc32c"]


def crc32c(data: bytes) -> int:
    """The CRC32C of ``data`` (bytes, not a view: the C function wants read-only bytes)."""
    return int(_value(data))
