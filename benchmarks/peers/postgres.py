"""PostgreSQL as a messaging system (the "outbox table"), with psycopg 3 (C binary build).

A topic is a table ``m_<topic> (id bigserial primary key, payload bytea)``.

* publish: one ``INSERT ... VALUES (%s), (%s), ...`` per batch, in autocommit (one
  statement, one transaction, one round trip; psycopg prepares it server-side after a
  few executions); ``synchronous_commit = on``, so it answers after its WAL flush;
  pipelined: ``window`` one-row ``INSERT``s (each its own transaction) in psycopg's
  pipeline mode;
* read: ``SELECT id, payload ... WHERE id > %s ORDER BY id LIMIT n`` (an index range);
* latency: the sender inserts and ``pg_notify``s in one statement; the consumer
  ``LISTEN``s and reads with the range ``SELECT`` whenever notified (not by polling);
* transactional publish: ``BEGIN``, the batch's ``INSERT``, an upsert of the caller's row
  in ``state (k bytea primary key, v bigint)``, ``COMMIT`` (four round trips, as an
  application writing an outbox row beside its state does);
* transaction cycle: the smallest durable conflict-checked write: one upsert of the
  caller's ``state`` row, in autocommit (one round trip, one WAL flush);
* bulk fill: ``COPY ... FROM STDIN (FORMAT BINARY)``;
* work queue: pgmq's layout and statements (the queue PostgreSQL users pick): a table
  ``q_<name> (msg_id bigserial primary key, read_ct, enqueued_at, vt, message)`` with an
  index on ``vt``; enqueue one multi-row ``INSERT``; receive ``UPDATE ... SET vt = now +
  lease, read_ct + 1`` of the rows a ``SELECT ... WHERE vt <= now ORDER BY msg_id LIMIT n
  FOR UPDATE SKIP LOCKED`` picked, ``RETURNING`` them; ack pgmq's ``delete``: ``DELETE
  ... WHERE msg_id = ANY(...)``; each its own transaction in autocommit.

Ordering caveat, true of any bigserial outbox: ids are taken at insert, rows become
visible at commit, so with concurrent producers a reader that has passed id N can miss a
row with a smaller id that commits later. The benchmark's reads are of settled topics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from benchmarks.peers.base import Call, Cursor, Kind, SystemBase, Workload

__all__ = ["PostgresOutbox", "PostgresReader"]

_STATE_DDL = "CREATE TABLE IF NOT EXISTS state (k bytea PRIMARY KEY, v bigint NOT NULL)"
_UPSERT = "INSERT INTO state (k, v) VALUES (%s, 1) ON CONFLICT (k) DO UPDATE SET v = state.v + 1"
_NOTIFY_WAIT_S = 1.0


def _table(topic: str) -> str:
    if not topic.replace("_", "").isalnum():
        raise ValueError(f"topic names are [A-Za-z0-9_]: {topic!r}")
    return f"m_{topic}"


def insert_sql(topic: str, rows: int) -> str:
    """The one statement that publishes ``rows`` messages."""
    values = ", ".join(["(%s)"] * rows)
    return f"INSERT INTO {_table(topic)} (payload) VALUES {values}"


def select_sql(topic: str) -> str:
    return f"SELECT id, payload FROM {_table(topic)} WHERE id > %s ORDER BY id LIMIT %s"


def _queue_table(queue: str) -> str:
    return "q_" + _table(queue).removeprefix("m_")


def queue_sql(queue: str, rows: int) -> tuple[str, str, str]:
    """pgmq's enqueue of ``rows`` messages, read (a lease of 30 s) and delete."""
    q = _queue_table(queue)
    values = ", ".join(["(%s)"] * rows)
    return (
        f"INSERT INTO {q} (message) VALUES {values}",
        f"WITH cte AS (SELECT msg_id FROM {q} WHERE vt <= clock_timestamp() "
        f"ORDER BY msg_id LIMIT %s FOR UPDATE SKIP LOCKED) "
        f"UPDATE {q} m SET vt = clock_timestamp() + interval '30 seconds', "
        f"read_ct = m.read_ct + 1 FROM cte WHERE m.msg_id = cte.msg_id "
        f"RETURNING m.msg_id, m.message",
        f"DELETE FROM {q} WHERE msg_id = ANY(%s)",
    )


def _connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


class PostgresReader:
    """See ``base.Reader``. A cursor is the id of the last row read."""

    def __init__(self, dsn: str, topic: str) -> None:
        self.conn = _connect(dsn)
        self.sql = select_sql(topic)

    def first(self) -> Cursor:
        return 0

    def read(self, cursor: Cursor, limit: int) -> tuple[list[bytes], Cursor]:
        rows = self.conn.execute(self.sql, (cursor, limit)).fetchall()
        if not rows:
            return [], cursor
        return [r[1] for r in rows], rows[-1][0]

    def close(self) -> None:
        self.conn.close()


class PostgresOutbox(SystemBase):
    name = "postgres"
    kind = Kind.PEER
    description = "PostgreSQL message table, synchronous_commit on (psycopg 3)"
    durable = True
    forks = True
    workloads = frozenset(Workload)

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._admin = _connect(dsn)
        self._admin.execute(_STATE_DDL)

    def create_topic(self, topic: str) -> None:
        self._admin.execute(f"DROP TABLE IF EXISTS {_table(topic)}")
        self._admin.execute(
            f"CREATE TABLE {_table(topic)} (id bigserial PRIMARY KEY, payload bytea NOT NULL)"
        )

    def drop_topic(self, topic: str) -> None:
        self._admin.execute(f"DROP TABLE IF EXISTS {_table(topic)}")

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        conn, sql, params, n = (
            _connect(self.dsn),
            insert_sql(topic, len(batch)),
            list(batch),
            len(batch),
        )

        def call() -> int:
            conn.execute(sql, params)
            return n

        return call

    def pipelined_publisher(self, topic: str, payload: bytes, window: int) -> Call:
        conn, sql, params = _connect(self.dsn), insert_sql(topic, 1), (payload,)

        def call() -> int:
            with conn.pipeline():  # every INSERT sent before the first answer is read
                for _ in range(window):
                    conn.execute(sql, params)
            return window

        return call

    def tx_publisher(self, topic: str, batch: Sequence[bytes], key: bytes) -> Call:
        conn, sql, params, n = (
            _connect(self.dsn),
            insert_sql(topic, len(batch)),
            list(batch),
            len(batch),
        )
        state = (key,)

        def call() -> int:
            with conn.transaction():
                conn.execute(sql, params)
                conn.execute(_UPSERT, state)
            return n

        return call

    def tx_cycle(self, key: bytes) -> Call:
        conn, state = _connect(self.dsn), (key,)

        def call() -> int:
            conn.execute(_UPSERT, state)
            return 1

        return call

    def sender(self, topic: str) -> Callable[[bytes], None]:
        conn = _connect(self.dsn)
        sql = (
            f"WITH i AS ({insert_sql(topic, 1)} RETURNING id) "
            f"SELECT pg_notify('{_table(topic)}', '') FROM i"
        )
        return lambda payload: (conn.execute(sql, (payload,)), None)[1]

    def subscribe(self, topic: str, stop: Callable[[], bool]) -> Iterator[bytes]:
        conn = _connect(self.dsn)
        conn.execute(f"LISTEN {_table(topic)}")
        sql = select_sql(topic)

        def follow() -> Iterator[bytes]:
            last = 0
            try:
                while not stop():
                    rows = conn.execute(sql, (last, 1000)).fetchall()
                    if rows:
                        last = rows[-1][0]
                        for row in rows:
                            yield row[1]
                        continue
                    # notifications that came while we read are queued: none is lost
                    for _ in conn.notifies(timeout=_NOTIFY_WAIT_S, stop_after=1):
                        pass
            finally:
                conn.close()

        return follow()

    def create_queue(self, queue: str) -> None:
        q = _queue_table(queue)
        self._admin.execute(f"DROP TABLE IF EXISTS {q}")
        self._admin.execute(
            f"CREATE TABLE {q} (msg_id bigserial PRIMARY KEY, read_ct int NOT NULL DEFAULT 0, "
            "enqueued_at timestamptz NOT NULL DEFAULT now(), "
            "vt timestamptz NOT NULL DEFAULT clock_timestamp(), message bytea NOT NULL)"
        )
        self._admin.execute(f"CREATE INDEX ON {q} (vt ASC)")

    def drop_queue(self, queue: str) -> None:
        self._admin.execute(f"DROP TABLE IF EXISTS {_queue_table(queue)}")

    def queue_worker(self, queue: str, batch: Sequence[bytes]) -> Call:
        conn = _connect(self.dsn)
        send, read, delete = queue_sql(queue, len(batch))
        params, n, expected = list(batch), len(batch), batch[0]

        def call() -> int:
            conn.execute(send, params)
            rows = conn.execute(read, (n,)).fetchall()
            if rows and bytes(rows[0][1]) != expected:
                raise RuntimeError("postgres returned a different payload")
            if rows:
                conn.execute(delete, ([r[0] for r in rows],))
            return len(rows)

        return call

    def reader(self, topic: str) -> PostgresReader:
        return PostgresReader(self.dsn, topic)

    def fill(self, topic: str, count: int, payload: bytes) -> None:
        with (
            self._admin.cursor() as cur,
            cur.copy(f"COPY {_table(topic)} (payload) FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types(["bytea"])
            row = (payload,)
            for _ in range(count):
                copy.write_row(row)

    def mark(self, topic: str) -> Cursor:
        row = self._admin.execute(f"SELECT coalesce(max(id), 0) FROM {_table(topic)}").fetchone()
        return row[0]

    def close(self) -> None:
        self._admin.close()

    def version(self) -> str:
        row = self._admin.execute("SHOW server_version").fetchone()
        return str(row[0])
