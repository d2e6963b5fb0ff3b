"""``redact``: a PostgreSQL URL as it may appear in messages and logs (host, port and
database; never the user's password)."""

from __future__ import annotations

import psycopg

__all__ = ["redact"]


def redact(url: str) -> str:
    """``url`` without a password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "postgresql (unparsable URL)"
    return f"postgresql://{info.get('host', '')}:{info.get('port', '')}/{info.get('dbname', '')}"
