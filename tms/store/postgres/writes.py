"""How ``PostgresStore`` writes: the statements, and one group-commit batch of callers'
writes applied as one statement (``tms.store.postgres.db`` serializes them).

* A batch (every write queued while the previous one ran, of any topics) is applied in
  **one statement**, its own transaction (one round trip, one commit, one WAL flush, as
  the LevelDB handle shares one sync): multi-row changes from ``unnest`` of arrays
  (binary parameters, encoded by ``tms.store.postgres.arrays``), each conditional on
  every fence of the batch holding — the fence rows read ``FOR SHARE``, so a concurrent
  ``acquire_fence`` (an ``UPDATE`` of the row) and the write wait for each other.
* A fence that does not hold applies nothing and raises nothing: the statement says so,
  the writes under a stale fence get ``FencedError`` and the rest is sent again.
* A batch of appended rows only (``new_keys``) is written as runs
  (``tms.store.postgres.runs``): each write's rows of a table one row of ``tms_run``,
  when no run's key range holds a key already (checked in the statement; else, or when
  two of the batch's runs overlap, the batch is written as below).
* Otherwise changes are collapsed in order (a later change of a key wins; a write's
  ``updates`` after its ops) and written as single rows: puts ``ON CONFLICT DO
  NOTHING`` then an upsert of the keys that existed, so an overwrite leaves no error in
  the server's log; ``updates`` are an ``UPDATE`` (only rows that exist change); a run
  holding a key the batch touches is dissolved into single rows in the same statement.
* ``sync=False`` commits with ``synchronous_commit = off``.
* A ``psycopg.Error`` is left to the caller (the store goes down on it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import psycopg

from tms.errors import FencedError, StorageUnavailableError
from tms.store.kv import Fence, Update, WriteOp
from tms.store.postgres.arrays import ByteaArray

__all__ = ["PendingWrite", "write_batch"]

log = logging.getLogger(__name__)

_HELD = """WITH f AS (SELECT count(*) AS held FROM (SELECT 1 FROM tms_fence WHERE (name, epoch)
IN (SELECT * FROM unnest(%(fn)b::bytea[], %(fe)s::bigint[])) FOR SHARE) held),"""
# The general write (see the module docstring): ``f`` the fences held, ``d`` deletes,
# ``n`` puts, ``hit`` the runs holding a key the write touches, dissolved: ``gone``
# deleted, ``back`` their entries as single rows (but those deleted or put here, with
# the new value of those updated here: ``tms.store.postgres.runs``), ``ins`` new keys,
# ``up`` (only when ``ins`` took fewer rows than given) replaces the keys that existed,
# ``ex`` changes existing single rows only (``updates``).
_WRITE = (
    _HELD
    + """
d AS (DELETE FROM tms_kv WHERE (SELECT held FROM f) = %(nf)s
      AND (t, k) IN (SELECT * FROM unnest(%(dt)b::bytea[], %(dk)b::bytea[]))),
n AS (SELECT * FROM unnest(%(pt)b::bytea[], %(pk)b::bytea[], %(pv)b::bytea[]) AS n (t, k, v)
      WHERE (SELECT held FROM f) = %(nf)s),
hit AS (SELECT DISTINCT r.t, r.k FROM (
          SELECT * FROM unnest(%(dt)b::bytea[], %(dk)b::bytea[])
          UNION ALL SELECT * FROM unnest(%(pt)b::bytea[], %(pk)b::bytea[])
          UNION ALL SELECT * FROM unnest(%(xt)b::bytea[], %(xk)b::bytea[])) AS x (t, k)
        CROSS JOIN LATERAL (SELECT t, k, kend FROM tms_run o
                            WHERE o.t = x.t AND o.k <= x.k ORDER BY o.k DESC LIMIT 1) r
        WHERE r.kend >= x.k AND (SELECT held FROM f) = %(nf)s),
gone AS (DELETE FROM tms_run o USING hit WHERE o.t = hit.t AND o.k = hit.k
         RETURNING o.t, o.ks, o.vs),
back AS (INSERT INTO tms_kv (t, k, v)
         SELECT g.t, e.k, coalesce(x.v, e.v)
         FROM gone g CROSS JOIN LATERAL unnest(g.ks, g.vs) AS e (k, v)
         LEFT JOIN unnest(%(xt)b::bytea[], %(xk)b::bytea[], %(xv)b::bytea[]) AS x (t, k, v)
              ON x.t = g.t AND x.k = e.k
         WHERE NOT EXISTS (SELECT 1 FROM unnest(%(dt)b::bytea[], %(dk)b::bytea[]) AS y (t, k)
                           WHERE y.t = g.t AND y.k = e.k)
         AND NOT EXISTS (SELECT 1 FROM n WHERE n.t = g.t AND n.k = e.k)),
ins AS (INSERT INTO tms_kv (t, k, v) SELECT * FROM n ON CONFLICT (t, k) DO NOTHING
        RETURNING t, k),
up AS (INSERT INTO tms_kv (t, k, v) SELECT * FROM n
       WHERE (SELECT count(*) FROM ins) < (SELECT count(*) FROM n)
       AND (n.t, n.k) NOT IN (SELECT t, k FROM ins)
       ON CONFLICT (t, k) DO UPDATE SET v = EXCLUDED.v),
ex AS (UPDATE tms_kv o SET v = x.v
       FROM unnest(%(xt)b::bytea[], %(xk)b::bytea[], %(xv)b::bytea[]) AS x (t, k, v)
       WHERE (SELECT held FROM f) = %(nf)s AND o.t = x.t AND o.k = x.k)
SELECT (SELECT held FROM f) = %(nf)s, true,
       CASE WHEN (SELECT count(*) FROM gone) < (SELECT count(*) FROM hit)
       THEN ('a run was dissolved meanwhile: ' || (SELECT count(*) FROM gone))::int END
"""
)
_FENCES = "SELECT name, epoch FROM tms_fence WHERE name = ANY(%b::bytea[])"
# Appends (``new_keys``): each write's rows of a table as one run (``rt`` its table,
# ``rn`` how many of the flat ``pk``/``pv`` are its entries; a run of one row is a
# single row: as small, and no array), written only when nothing is in any run's key
# range (``c``: else none is written and the batch goes as single rows by ``_WRITE``).
_RUNS = """
u AS (SELECT t, n, sum(n) OVER (ORDER BY o) - n AS off
      FROM unnest(%(rt)b::bytea[], %(rn)s::int[]) WITH ORDINALITY AS u (t, n, o)),
r AS (SELECT u.t, s.ks[1] AS k, s.ks[u.n] AS kend, s.ks, s.vs, u.n FROM u CROSS JOIN LATERAL (
        SELECT (%(pk)b::bytea[])[u.off + 1 : u.off + u.n] AS ks,
               (%(pv)b::bytea[])[u.off + 1 : u.off + u.n] AS vs) s),
c AS (SELECT count(*) AS bad FROM r WHERE
      EXISTS (SELECT 1 FROM tms_kv o WHERE o.t = r.t AND o.k >= r.k AND o.k <= r.kend)
      OR EXISTS (SELECT 1 FROM (SELECT kend FROM tms_run p WHERE p.t = r.t AND p.k <= r.kend
                                ORDER BY p.k DESC LIMIT 1) p WHERE p.kend >= r.k)),
ins AS (INSERT INTO tms_run (t, k, kend, ks, vs) SELECT t, k, kend, ks, vs FROM r
        WHERE n > 1 AND (SELECT bad FROM c) = 0{held}),
one AS (INSERT INTO tms_kv (t, k, v) SELECT t, k, vs[1] FROM r
        WHERE n = 1 AND (SELECT bad FROM c) = 0{held})
"""
# A batch of one-row appends only (small publish requests) is a plain INSERT of single
# rows, checked against runs only: a key that exists fails it whole (then ``_WRITE``).
_SINGLES = """
u AS (SELECT * FROM unnest(%(pt)b::bytea[], %(pk)b::bytea[], %(pv)b::bytea[]) AS u (t, k, v)),
c AS (SELECT count(*) AS bad FROM u WHERE
      EXISTS (SELECT 1 FROM (SELECT kend FROM tms_run p WHERE p.t = u.t AND p.k <= u.k
                             ORDER BY p.k DESC LIMIT 1) p WHERE p.kend >= u.k)),
ins AS (INSERT INTO tms_kv (t, k, v) SELECT * FROM u WHERE (SELECT bad FROM c) = 0{held})
"""
_FENCED = " AND (SELECT held FROM f) = %(nf)s"
_ANSWER = "SELECT true, (SELECT bad FROM c) = 0"
_ANSWER_FENCED = "SELECT (SELECT held FROM f) = %(nf)s, (SELECT bad FROM c) = 0"
_APPEND = "WITH" + _RUNS.format(held="") + _ANSWER
_APPEND_FENCED = _HELD + _RUNS.format(held=_FENCED) + _ANSWER_FENCED
_APPEND_SINGLES = "WITH" + _SINGLES.format(held="") + _ANSWER
_APPEND_SINGLES_FENCED = _HELD + _SINGLES.format(held=_FENCED) + _ANSWER_FENCED


@dataclass(slots=True)
class PendingWrite:
    """One caller's ``write``, queued for the group commit; ``error`` its outcome."""

    ops: Sequence[WriteOp]
    sync: bool
    epoch: int | None
    fence: Fence | None
    updates: Sequence[Update] = ()
    new_keys: bool = False
    error: StorageUnavailableError | None = None


def write_batch(conn: psycopg.Connection[Any], writes: list[PendingWrite], where: str) -> None:
    """Apply ``writes`` (one statement, again without those whose fence was refused:
    each of them gets ``FencedError``). Raises ``psycopg.Error``."""
    sync = any(w.sync for w in writes)
    while writes and not _apply_again_if_raced(conn, writes, sync):
        # a fence did not hold, nothing was applied: which ones, and again without
        names = sorted({w.fence[0] for w in writes if w.fence is not None})
        current = {bytes(n): int(e) for n, e in conn.execute(_FENCES, (names,))}
        for w in writes:
            if w.fence is not None and current.get(w.fence[0]) != w.fence[1]:
                name, epoch = w.fence
                w.error = FencedError(
                    f"fence {name!r} epoch {epoch} was superseded "
                    f"(now {current.get(name)}) in {where}"
                )
        writes = [w for w in writes if w.error is None]


def _apply_again_if_raced(
    conn: psycopg.Connection[Any], writes: list[PendingWrite], sync: bool
) -> bool:
    """``_apply``, again while another session dissolved a run this write meant to.

    In READ COMMITTED a run that another instance's write (a purge, a negation)
    dissolved after this statement's snapshot was taken is not deleted again, and its
    entries, single rows now, are not visible to this statement's deletes and updates:
    they would be lost. ``_WRITE`` fails as a whole then (nothing applied), and is sent
    again with a new snapshot."""
    for attempt in range(_RACE_ATTEMPTS):
        try:
            return _apply(conn, writes, sync)
        except psycopg.errors.InvalidTextRepresentation:
            if attempt == _RACE_ATTEMPTS - 1:
                raise
            log.info("a run this write touches was dissolved meanwhile; writing again")
    raise AssertionError("unreachable")


_RACE_ATTEMPTS = 10


def _apply(conn: psycopg.Connection[Any], writes: list[PendingWrite], sync: bool) -> bool:
    """Write ``writes`` in one statement (one transaction); whether their fences held
    (else nothing was written)."""
    fences = sorted({w.fence for w in writes if w.fence is not None})
    params: dict[str, Any] = {
        "fn": ByteaArray([f[0] for f in fences]),
        "fe": [f[1] for f in fences],
        "nf": len(fences),
    }
    runs = _runs(writes) if all(w.new_keys for w in writes) else None
    if runs is not None:
        params["pk"] = ByteaArray([k for _t, rows in runs for k, _v in rows])
        params["pv"] = ByteaArray([v for _t, rows in runs for _k, v in rows])
        if all(len(rows) == 1 for _t, rows in runs):
            params["pt"] = ByteaArray([t for t, _rows in runs])
            sql = _APPEND_SINGLES_FENCED if fences else _APPEND_SINGLES
        else:
            params["rt"] = ByteaArray([t for t, _rows in runs])
            params["rn"] = [len(rows) for _t, rows in runs]
            sql = _APPEND_FENCED if fences else _APPEND
        try:
            held, fits = _execute(conn, sql, params, sync)
        except psycopg.errors.UniqueViolation:
            held, fits = True, False
        if not held or fits:
            return held
        log.info("a batch of new rows met existing keys; it is written as single rows")
    final: dict[tuple[bytes, bytes], tuple[bytes | None, bool]] = {}
    for w in writes:
        for name, key, value in w.ops:
            final[(name, key)] = (value, False)
        for name, key, value in w.updates:
            earlier = final.get((name, key))
            if earlier is None:
                final[(name, key)] = (value, True)
            elif earlier[0] is not None:  # put earlier in the batch: it exists
                final[(name, key)] = (value, earlier[1])
            # else deleted earlier in the batch: it stays deleted
    a: dict[str, list[Any]] = {c: [] for c in ("dt", "dk", "pt", "pk", "pv", "xt", "xk", "xv")}
    for (name, key), (value, existing) in final.items():
        if value is None:
            a["dt"].append(name)
            a["dk"].append(key)
        else:
            x = "x" if existing else "p"
            a[x + "t"].append(name)
            a[x + "k"].append(key)
            a[x + "v"].append(value)
    params.update((name, ByteaArray(items)) for name, items in a.items())
    return _execute(conn, _WRITE, params, sync)[0]


def _runs(writes: list[PendingWrite]) -> list[tuple[bytes, list[tuple[bytes, bytes]]]] | None:
    """Each write's puts of a table as one run (table, its entries in key order), or
    None when two runs' key ranges overlap (the batch is then written as single rows)."""
    runs: list[tuple[bytes, list[tuple[bytes, bytes]]]] = []
    for w in writes:
        by_table: dict[bytes, dict[bytes, bytes]] = {}
        for name, key, value in w.ops:
            assert value is not None  # new_keys: every op is a put
            by_table.setdefault(name, {})[key] = value
        for name, rows in by_table.items():
            runs.append((name, sorted(rows.items())))
    ranges = sorted((t, rows[0][0], rows[-1][0]) for t, rows in runs)
    for (t1, _first, last), (t2, first, _last) in pairwise(ranges):
        if t1 == t2 and first <= last:
            return None
    return runs


def _execute(
    conn: psycopg.Connection[Any], sql: str, params: dict[str, Any], sync: bool
) -> tuple[bool, bool]:
    """Run a write statement as its own transaction; its answer: whether its fences held
    (if any: else nothing was written), and whether its rows fitted (see ``_RUNS``)."""
    if sync:
        cur = conn.execute(sql, params)
    else:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            cur = conn.execute(sql, params)
    row = cur.fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])
