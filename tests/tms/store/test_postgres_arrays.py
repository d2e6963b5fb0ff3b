"""``tms.store.postgres.arrays``: the ``bytea[]`` parameters the write statements send,
against golden bytes and against PostgreSQL's own reading of them."""

from __future__ import annotations

import os

import psycopg
import pytest

from tms.store.postgres.arrays import ByteaArray, encode_bytea_array, register


def be32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def test_an_array_is_its_header_then_each_element_with_its_length() -> None:
    golden = (
        be32(1)  # one dimension
        + be32(0)  # no NULLs
        + be32(17)  # of bytea
        + be32(3)  # three elements
        + be32(1)  # counted from 1
        + be32(2)
        + b"ab"
        + be32(0)  # an empty element
        + be32(1)
        + b"\x00"
    )
    assert encode_bytea_array([b"ab", b"", b"\x00"]) == golden


def test_an_empty_array_has_no_dimension() -> None:
    assert encode_bytea_array([]) == be32(0) + be32(0) + be32(17)


@pytest.mark.parametrize(
    "items",
    [[], [b""], [b"a", b"", b"\xff" * 3], [os.urandom(n) for n in range(0, 2000, 7)]],
    ids=["empty", "one empty element", "small", "many"],
)
def test_postgresql_reads_back_the_elements_in_order(pg_url: str, items: list[bytes]) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        register(conn.adapters)
        row = conn.execute(
            "SELECT %(a)b::bytea[], cardinality(%(a)b::bytea[])", {"a": ByteaArray(items)}
        ).fetchone()
    assert row is not None
    assert [bytes(x) for x in row[0]] == items and row[1] == len(items)
