"""The design's "table debugger": raw rows of a topic, without consuming anything.

``inspect_topic`` lists the message-table rows of every generation of a topic in a time
range, each with its kind, write pointer, rolled-back mark and payload size, and after
each commit marker the payload-table rows it references (and its seal). Nothing is
filtered: rolled-back entries, other generations and expired rows all show.
"""

from __future__ import annotations

from typing import Any

from tms.codec import keys
from tms.codec.values import decode_message_value, decode_payload_value
from tms.ids import MessageId
from tms.model import TopicId
from tms.store.tables import SEAL_POSITION, Tables

__all__ = ["inspect_topic"]


def inspect_topic(
    tables: Tables, topic: TopicId, start_ms: int = 0, end_ms: int | None = None, limit: int = 1000
) -> dict[str, Any]:
    """Rows with ``start_ms <= publish_ms < end_ms`` (end None: no end), at most ``limit``
    message rows."""
    metadata = tables.metadata.get_any(topic)
    rows: list[dict[str, Any]] = []
    count = 0
    for generation in range(1, abs(metadata.generation) + 1):
        prefix = keys.topic_prefix(topic, generation)
        for key, value in tables.messages.rows(prefix, (start_ms, 0)):
            _gen, publish_ms, seq = keys.decode_message_key(key)
            if end_ms is not None and publish_ms >= end_ms:
                break
            if count >= limit:
                return _report(metadata.generation, rows, truncated=True)
            count += 1
            entry = decode_message_value(value)
            ptr = entry.tx_write_pointer
            row: dict[str, Any] = {
                "table": "message",
                "generation": generation,
                "publish_ms": publish_ms,
                "seq": seq,
                "id": MessageId(publish_ms, seq).hex,
                "kind": "plain"
                if ptr is None
                else ("reference" if entry.is_reference else "transactional"),
                "tx_write_pointer": abs(ptr) if ptr is not None else None,
                "rolled_back": ptr is not None and ptr < 0,
                "payload_bytes": len(entry.payload) if entry.payload is not None else None,
                "ttl_s": entry.ttl_s,
            }
            rows.append(row)
            if entry.is_reference and ptr is not None:
                rows.extend(_payload_rows(tables, prefix, generation, abs(ptr)))
    return _report(metadata.generation, rows, truncated=False)


def _payload_rows(tables: Tables, prefix: bytes, generation: int, wp: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key, value in tables.payloads.rows(prefix, wp):
        _gen, _wp, write_ms, p_seq = keys.decode_payload_key(key)
        payload, ttl = decode_payload_value(value)
        out.append(
            {
                "table": "payload",
                "generation": generation,
                "tx_write_pointer": wp,
                "write_ms": write_ms,
                "seq": p_seq,
                "payload_bytes": len(payload),
                "ttl_s": ttl,
            }
        )
    seal = tables.payloads.seal_of(prefix, wp)
    if seal is not None:
        out.append(
            {
                "table": "payload",
                "generation": generation,
                "tx_write_pointer": wp,
                "seal": {"publish_ms": seal[0], "seq": seal[1]},
                "write_ms": SEAL_POSITION[0],
            }
        )
    return out


def _report(generation: int, rows: list[dict[str, Any]], *, truncated: bool) -> dict[str, Any]:
    return {
        "generation": generation,
        "deleted": generation < 0,
        "rows": rows,
        "truncated": truncated,
    }
