"""The design's "table debugger": raw rows of a topic, without consuming anything.

``recent_messages`` lists the newest messages of a topic's live generation, newest
first, each with its transactional status (``tms.filter.classify``) against a fresh
transaction: what the console's topic page shows.

``inspect_topic`` lists the message-table rows of every generation of a topic in a time
range, each with its kind, write pointer, rolled-back mark and payload size, and after
each commit marker the payload-table rows it references (and its seal). Nothing is
filtered: rolled-back entries, other generations and expired rows all show.

``inspect_queue`` lists a queue's messages with their state and lease (``tms.queues``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tms.codec import keys
from tms.filter import classify
from tms.ids import MessageId
from tms.model import TopicId, TopicMetadata
from tms.queue_leases import stored_leases
from tms.queues import QueueState
from tms.store.tables import Tables
from txn.transaction import Transaction

__all__ = ["MAX_RECENT", "inspect_queue", "inspect_topic", "recent_messages"]

MAX_RECENT = 1000


def recent_messages(
    tables: Tables,
    metadata: TopicMetadata,
    *,
    limit: int = 50,
    before: MessageId | None = None,
    snapshot: Transaction | None = None,
    preview_bytes: int = 1024,
) -> dict[str, Any]:
    """The newest ``limit`` messages of the live generation with ids below ``before``
    (None: the newest), newest first. Each has its id, publish time, the first
    ``preview_bytes`` of its payload (``truncated`` when cut), its ``size``, kind, raw
    write pointer and status judged against ``snapshot``. ``more``: older messages
    exist (ask again with the last id as ``before``). Rolled-back and uncommitted
    messages are listed too (a non-transactional read sees them as well)."""
    prefix = keys.topic_prefix(metadata.topic, metadata.generation)
    # The row at ``before`` itself is read too: a commit marker there may hold payloads
    # with smaller ids than ``before``.
    through = (before.publish_ms, before.seq) if before is not None else None
    out: list[dict[str, Any]] = []
    for row in tables.messages.scan_back(prefix, through):
        if len(out) > limit:
            break
        entry = row.entry
        ptr = entry.tx_write_pointer
        common = {
            "publishTime": row.publish_ms,
            "sequenceId": row.seq,
            "txWritePointer": ptr,
            "status": classify(snapshot, ptr),
        }
        if entry.payload is not None:
            kind = "plain" if ptr is None else "transactional"
            items = [(MessageId(row.publish_ms, row.seq), entry.payload, kind)]
        else:
            assert ptr is not None  # a reference always has a pointer
            items = [
                (MessageId(row.publish_ms, row.seq, p.write_ms, p.p_seq), p.payload, "reference")
                for p in tables.payloads.scan(prefix, abs(ptr))
            ]
        for message_id, payload, kind in reversed(items):
            if before is not None and message_id >= before:
                continue
            out.append(
                {
                    "id": message_id.hex,
                    **common,
                    "kind": kind,
                    "size": len(payload),
                    "payload": payload[:preview_bytes],
                    "truncated": len(payload) > preview_bytes,
                }
            )
    return {"messages": out[:limit], "more": len(out) > limit}


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
        for row in tables.messages.scan(prefix, (start_ms, 0)):
            if end_ms is not None and row.publish_ms >= end_ms:
                break
            if count >= limit:
                return _report(metadata.generation, rows, truncated=True)
            count += 1
            entry = row.entry
            ptr = entry.tx_write_pointer
            rows.append(
                {
                    "table": "message",
                    "generation": generation,
                    "publish_ms": row.publish_ms,
                    "seq": row.seq,
                    "id": MessageId(row.publish_ms, row.seq).hex,
                    "kind": "plain"
                    if ptr is None
                    else ("reference" if entry.is_reference else "transactional"),
                    "tx_write_pointer": abs(ptr) if ptr is not None else None,
                    "rolled_back": ptr is not None and ptr < 0,
                    "payload_bytes": len(entry.payload) if entry.payload is not None else None,
                    "ttl_s": entry.ttl_s,
                }
            )
            if entry.is_reference and ptr is not None:
                rows.extend(_payload_rows(tables, prefix, generation, abs(ptr)))
    return _report(metadata.generation, rows, truncated=False)


def _payload_rows(tables: Tables, prefix: bytes, generation: int, wp: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "table": "payload",
            "generation": generation,
            "tx_write_pointer": wp,
            "write_ms": row.write_ms,
            "seq": row.p_seq,
            "payload_bytes": len(row.payload),
            "ttl_s": row.ttl_s,
        }
        for row in tables.payloads.scan(prefix, wp)
    ]
    seal = tables.payloads.seal_of(prefix, wp)
    if seal is not None:
        out.append(
            {
                "table": "payload",
                "generation": generation,
                "tx_write_pointer": wp,
                "seal": {"publish_ms": seal[0], "seq": seal[1]},
                "write_ms": keys.SEAL_POSITION[0],
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


def inspect_queue(
    tables: Tables, metadata: TopicMetadata, start_ms: int = 0, limit: int = 1000
) -> dict[str, Any]:
    """A queue's messages enqueued from ``start_ms`` on, in id order, with their state,
    attempts, schedule, lease expiry and pending transaction (at most ``limit``)."""
    prefix = keys.topic_prefix(metadata.topic, metadata.generation)
    rows: list[dict[str, Any]] = []
    truncated = False
    _records, leases = stored_leases(tables.queues, prefix)
    for row in tables.queues.scan_rows(prefix, keys.pack_position(start_ms, 0)):
        if len(rows) >= limit:
            truncated = True
            break
        lease = leases.get(row.id)
        if lease is not None:  # held in memory by its writer (tms.queue_leases)
            attempts, lease_ms = lease
            row = dataclasses.replace(  # noqa: PLW2901 (shown as its writer sees it)
                row, state=QueueState.LEASED, attempts=attempts, lease_ms=lease_ms
            )
        rows.append(
            {
                "id": row.id.hex(),
                "state": row.state.name.lower(),
                "attempts": row.attempts,
                "priority": row.priority,
                "enqueueTime": row.enqueued_ms,
                "due": row.due_ms,
                "leaseExpires": row.lease_ms or None,
                "doneTime": row.done_ms or None,
                "transactionWritePointer": row.tx_write_pointer or None,
                "key": row.key,
                "payloadSize": len(row.payload),
            }
        )
    return {
        "kind": "queue",
        "generation": metadata.generation,
        "deleted": False,
        "rows": [],
        "messages": rows,
        "truncated": truncated,
    }
