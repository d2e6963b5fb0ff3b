"""``PositionTable``: the rows of subscriptions' positions written under transactions'
write pointers (``tms.positions``), keyed (topic generation, subscription, write
pointer); their bytes are ``tms.codec.subscriptions``'. Written through a
``TableBatch`` (``put_position``, ``delete_positions``) like every other row.
"""

from __future__ import annotations

from tms.codec import keys
from tms.codec.subscriptions import (
    PositionRow,
    decode_position_key,
    decode_position_value,
    position_key,
    position_prefix,
)
from tms.store.kv import TableStore

__all__ = ["POSITION_TABLE", "PositionTable"]

POSITION_TABLE = b"c"


class PositionTable:
    """The rows of transactional positions in one ``TableStore``."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def rows(self, topic_prefix: bytes, name: str) -> list[PositionRow]:
        """One subscription's rows in a topic generation, by write pointer."""
        prefix = position_prefix(topic_prefix, name)
        return [
            decode_position_value(int.from_bytes(key[-8:], "big", signed=True), value)
            for key, value in self.store.scan(prefix, keys.stop_key_for_prefix(prefix))
        ]

    def all_rows(self, topic_prefix: bytes) -> dict[str, list[PositionRow]]:
        """Every subscription's rows in a topic generation, by name."""
        found: dict[str, list[PositionRow]] = {}
        for key, value in self.store.scan(topic_prefix, keys.stop_key_for_prefix(topic_prefix)):
            name, wp = decode_position_key(key, topic_prefix)
            found.setdefault(name, []).append(decode_position_value(wp, value))
        return found

    def exists(self, topic_prefix: bytes, name: str, write_pointer: int) -> bool:
        return self.store.get(position_key(topic_prefix, name, write_pointer)) is not None
