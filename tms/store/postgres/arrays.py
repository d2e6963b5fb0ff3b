"""``bytea[]`` parameters encoded by us: PostgreSQL's binary array format (what its
``array_recv`` reads), for the write statements' ``unnest`` of hundreds of rows.

psycopg encodes a list of ``bytes`` element by element in Python (a ``struct.pack``
each); a publish of 100 messages sends three such arrays of about 100 elements per
table row kind, and that encoding was a third of the writing thread's time. Here an
array is one ``bytes.join``.

Format (big-endian ``int32`` throughout)::

    ndim (1, or 0 for an empty array)   has_nulls (0)   element type (17: bytea)
    [ length of dimension 1   its lower bound (1) ]      only when ndim = 1
    per element: its length, then its bytes

Pure: no I/O. ``ByteaArray`` wraps an encoded array for a statement's parameters; the
connection learns to send it as it is with ``register(adapters)``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import chain

from psycopg import adapt, pq

__all__ = ["BYTEA_ARRAY_OID", "ByteaArray", "encode_bytea_array", "register"]

BYTEA_OID = 17
BYTEA_ARRAY_OID = 1001
_HEADER = struct.Struct(">iiiii")
_EMPTY = struct.pack(">iii", 0, 0, BYTEA_OID)
_LENGTH = struct.Struct(">i")


def encode_bytea_array(items: Sequence[bytes]) -> bytes:
    """The binary form of the one-dimensional ``bytea[]`` holding ``items`` in order."""
    if not items:
        return _EMPTY
    pack = _LENGTH.pack
    return _HEADER.pack(1, 0, BYTEA_OID, len(items), 1) + b"".join(
        chain.from_iterable((pack(len(item)), item) for item in items)
    )


class ByteaArray:
    """An encoded ``bytea[]`` (``encode_bytea_array``) as a statement parameter."""

    __slots__ = ("data",)

    def __init__(self, items: Sequence[bytes]) -> None:
        self.data = encode_bytea_array(items)


class _ByteaArrayDumper(adapt.Dumper):
    format = pq.Format.BINARY
    oid = BYTEA_ARRAY_OID

    def dump(self, obj: ByteaArray) -> bytes:
        return obj.data


def register(adapters: adapt.AdaptersMap) -> None:
    """Let a connection (or a map connections copy) send ``ByteaArray`` parameters."""
    adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
