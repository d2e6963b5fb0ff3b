"""Runs: the rows a write appended together (``new_keys``: a publish request's messages,
a transaction's payloads) stored as **one** row of ``PostgresStore`` — one heap tuple,
one index entry and a few WAL records for a whole request instead of two WAL records
per message. How they are read, and the invariant every write keeps.

Schema (``create_run_table``)::

    tms_run(t bytea, k bytea, kend bytea, ks bytea[], vs bytea[], PRIMARY KEY (t, k))

A run holds the keys ``ks`` (ascending, ``k`` the first, ``kend`` the last) of table ``t``
and their values ``vs``. **Invariant**: a run's key range ``[k, kend]`` holds no row of
``tms_kv`` and overlaps no other run, so every key is in exactly one place:

* a run is only written when nothing is in its range (the append statement checks it,
  ``tms.store.postgres.writes``; else the batch is written as single rows);
* any other write touching a key inside a run's range (a put, a delete, a negation)
  first dissolves the run in the same statement: its entries become single rows, minus
  the keys the write deletes, with the write's new values — so a run whose every entry
  is deleted (TTL, retention, an old generation) goes as one row.

Reads merge the two tables by key (``merge_chunks``); a scan starting inside a run
begins at that run (the greatest ``k`` at or below the scan's start), so a consumer's
position may point into the middle of one.

Pure but for the statements this module runs on a connection it is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

__all__ = ["GET", "create_run_table", "merge_chunks", "run_chunks"]

_RUN_SCHEMA = """
CREATE TABLE IF NOT EXISTS tms_run (
    t    bytea NOT NULL,
    k    bytea NOT NULL,
    kend bytea NOT NULL,
    ks   bytea[]{compression} NOT NULL,
    vs   bytea[]{compression} NOT NULL,
    PRIMARY KEY (t, k)
)
"""


def create_run_table(conn: psycopg.Connection[Any]) -> None:
    """Create ``tms_run`` unless it exists (in the caller's transaction). A run of 100
    messages is larger than a page, so PostgreSQL compresses its arrays and stores them
    out of line: with lz4 where the server has it (its default, pglz, took 3 times the
    server's time for the statement that appends 4 runs of 100 rows: 0.68 against
    0.25 ms), else with the default."""
    try:
        with conn.transaction():  # a savepoint: a server without lz4 refuses the clause
            conn.execute(_RUN_SCHEMA.format(compression=" COMPRESSION lz4"))
    except psycopg.errors.FeatureNotSupported:
        conn.execute(_RUN_SCHEMA.format(compression=""))


GET = """
SELECT v FROM tms_kv WHERE t = %(t)b AND k = %(k)b
UNION ALL
SELECT r.vs[array_position(r.ks, %(k)b::bytea)] FROM (
    SELECT ks, vs, kend FROM tms_run WHERE t = %(t)b AND k <= %(k)b ORDER BY k DESC LIMIT 1
) r WHERE r.kend >= %(k)b AND array_position(r.ks, %(k)b::bytea) IS NOT NULL
"""
"""A key's value: its single row, or its entry in the run whose range holds it."""

_FIRST_RUNS = 4
_MAX_RUNS = 64
_Chunk = list[tuple[bytes, bytes]]


def run_chunks(
    conn: psycopg.Connection[Any],
    table: bytes,
    start: bytes,
    stop: bytes | None,
    reverse: bool,
) -> Iterator[_Chunk]:
    """The entries of ``table``'s runs with ``start <= key < stop`` in key order (in the
    caller's transaction), a run's worth per chunk."""
    where = "t = %b" if stop is None else "t = %b AND k < %b"
    below: tuple[bytes, ...] = (table,) if stop is None else (table, stop)
    if reverse:
        # from the top down; the first run below ``start`` may still reach into the range
        for k, ks, vs in _pages(conn, where, below, "DESC"):
            chunk = _within(ks, vs, start, stop)[::-1]
            if chunk:
                yield chunk
            if k < start:
                return  # every run further down ends below ``start``
        return
    # the run holding ``start``, if one does, then the runs beginning in the range
    row = conn.execute(
        "SELECT ks, vs FROM (SELECT ks, vs, kend FROM tms_run WHERE t = %b AND k < %b "
        "ORDER BY k DESC LIMIT 1) r WHERE kend >= %b",
        (table, start, start),
        binary=True,
    ).fetchone()
    if row is not None and (head := _within(row[0], row[1], start, stop)):
        yield head
    for _k, ks, vs in _pages(conn, where + " AND k >= %b", (*below, start), "ASC"):
        chunk = _within(ks, vs, start, stop)
        if chunk:
            yield chunk


def _pages(
    conn: psycopg.Connection[Any], where: str, bounds: tuple[bytes, ...], order: str
) -> Iterator[tuple[bytes, list[bytes], list[bytes]]]:
    """The runs ``where`` selects, (k, ks, vs) in ``order`` of their first key, read a
    page at a time (4 runs growing to 64), each page after the last key of the one
    before."""
    past = " AND k < %b" if order == "DESC" else " AND k > %b"
    size = _FIRST_RUNS
    last: bytes | None = None
    while True:
        sql = f"SELECT k, ks, vs FROM tms_run WHERE {where}"
        sql += ("" if last is None else past) + f" ORDER BY k {order} LIMIT %s"
        params = (*bounds, size) if last is None else (*bounds, last, size)
        rows = conn.execute(sql, params, binary=True).fetchall()
        yield from rows
        if len(rows) < size:
            return
        last = rows[-1][0]
        size = min(size * 2, _MAX_RUNS)


def _within(ks: list[bytes], vs: list[bytes], start: bytes, stop: bytes | None) -> _Chunk:
    """A run's entries with ``start <= key < stop``, ascending."""
    if ks[0] >= start and (stop is None or ks[-1] < stop):
        return list(zip(ks, vs, strict=True))
    return [
        (key, value)
        for key, value in zip(ks, vs, strict=True)
        if key >= start and (stop is None or key < stop)
    ]


def merge_chunks(a: Iterator[_Chunk], b: Iterator[_Chunk], reverse: bool) -> Iterator[_Chunk]:
    """Two key-ordered streams of non-empty chunks with no key in common, as one (a
    chunk that lies wholly before the other stream's next key passes as it is)."""
    ca, cb = next(a, None), next(b, None)
    while ca is not None and cb is not None:
        if _before(ca[-1][0], cb[0][0], reverse):
            yield ca
            ca = next(a, None)
        elif _before(cb[-1][0], ca[0][0], reverse):
            yield cb
            cb = next(b, None)
        else:
            # they interleave: merge up to the smaller of their last keys
            edge = ca[-1][0] if _before(ca[-1][0], cb[-1][0], reverse) else cb[-1][0]
            take_a = [row for row in ca if not _before(edge, row[0], reverse)]
            take_b = [row for row in cb if not _before(edge, row[0], reverse)]
            yield sorted(take_a + take_b, reverse=reverse)
            ca = ca[len(take_a) :] or next(a, None)
            cb = cb[len(take_b) :] or next(b, None)
    if ca is not None:
        yield ca
        yield from a
    if cb is not None:
        yield cb
        yield from b


def _before(x: bytes, y: bytes, reverse: bool) -> bool:
    return x > y if reverse else x < y
