"""The shared backend: PostgreSQL through psycopg 3, for several service instances on
one database (``tms serve --store postgresql://...``)."""

from tms.store.postgres.db import PostgresStore

__all__ = ["PostgresStore"]
