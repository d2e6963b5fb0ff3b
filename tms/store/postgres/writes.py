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
* Changes are collapsed in order (a later change of a key wins; a write's ``updates``
  after its ops). Puts of a batch of appended rows (``new_keys``) are a plain
  ``INSERT``; others ``ON CONFLICT DO NOTHING`` then an upsert of the keys that existed,
  so an overwrite leaves no error in the server's log; ``updates`` are an ``UPDATE``
  (only rows that exist change). ``sync=False`` commits with ``synchronous_commit =
  off``.
* A ``psycopg.Error`` is left to the caller (the store goes down on it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
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
# ``ins`` new keys, ``up`` (only when ``ins`` took fewer rows than given) replaces the
# keys that existed, ``ex`` changes existing rows only (``updates``).
_WRITE = (
    _HELD
    + """
d AS (DELETE FROM tms_kv WHERE (SELECT held FROM f) = %(nf)s
      AND (t, k) IN (SELECT * FROM unnest(%(dt)b::bytea[], %(dk)b::bytea[]))),
n AS (SELECT * FROM unnest(%(pt)b::bytea[], %(pk)b::bytea[], %(pv)b::bytea[]) AS n (t, k, v)
      WHERE (SELECT held FROM f) = %(nf)s),
ins AS (INSERT INTO tms_kv (t, k, v) SELECT * FROM n ON CONFLICT (t, k) DO NOTHING
        RETURNING t, k),
up AS (INSERT INTO tms_kv (t, k, v) SELECT * FROM n
       WHERE (SELECT count(*) FROM ins) < (SELECT count(*) FROM n)
       AND (n.t, n.k) NOT IN (SELECT t, k FROM ins)
       ON CONFLICT (t, k) DO UPDATE SET v = EXCLUDED.v),
ex AS (UPDATE tms_kv o SET v = x.v
       FROM unnest(%(xt)b::bytea[], %(xk)b::bytea[], %(xv)b::bytea[]) AS x (t, k, v)
       WHERE (SELECT held FROM f) = %(nf)s AND o.t = x.t AND o.k = x.k)
SELECT (SELECT held FROM f) = %(nf)s
"""
)
_FENCES = "SELECT name, epoch FROM tms_fence WHERE name = ANY(%b::bytea[])"
# Appends (``new_keys``) are a plain INSERT, half the server's work per row of the above;
# a key that exists after all fails it whole (an anomaly), and ``_WRITE`` is sent.
_APPEND = (
    "INSERT INTO tms_kv (t, k, v) "
    "SELECT * FROM unnest(%(pt)b::bytea[], %(pk)b::bytea[], %(pv)b::bytea[])"
)
_APPEND_FENCED = (
    _HELD
    + """
ins AS (INSERT INTO tms_kv (t, k, v)
        SELECT * FROM unnest(%(pt)b::bytea[], %(pk)b::bytea[], %(pv)b::bytea[])
        WHERE (SELECT held FROM f) = %(nf)s)
SELECT (SELECT held FROM f) = %(nf)s
"""
)


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
    while writes and not _apply(conn, writes, sync):
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


def _apply(conn: psycopg.Connection[Any], writes: list[PendingWrite], sync: bool) -> bool:
    """Write ``writes`` in one statement (one transaction); whether their fences held
    (else nothing was written)."""
    fences = sorted({w.fence for w in writes if w.fence is not None})
    params: dict[str, Any] = {
        "fn": ByteaArray([f[0] for f in fences]),
        "fe": [f[1] for f in fences],
        "nf": len(fences),
    }
    if all(w.new_keys for w in writes):
        params["pt"] = ByteaArray([name for w in writes for name, _k, _v in w.ops])
        params["pk"] = ByteaArray([key for w in writes for _n, key, _v in w.ops])
        # new_keys: every op is a put
        params["pv"] = ByteaArray([value for w in writes for _n, _k, value in w.ops])  # type: ignore[misc]
        try:
            return _execute(conn, _APPEND_FENCED if fences else _APPEND, params, sync)
        except psycopg.errors.UniqueViolation:
            log.warning("a batch of new rows met an existing key; it is written again")
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
    return _execute(conn, _WRITE, params, sync)


def _execute(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any], sync: bool) -> bool:
    """Run a write statement as its own transaction; whether its fences held (if any)."""
    if sync:
        cur = conn.execute(sql, params)
    else:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            cur = conn.execute(sql, params)
    if cur.description is None:
        return True
    row = cur.fetchone()
    return bool(row and row[0])
