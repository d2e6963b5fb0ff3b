"""The tables on every engine (``tests.tms.store.engines``): CDAP's metadata, message and
payload table scenarios, and the rows cleanup removes."""

from __future__ import annotations

import threading

import pytest

from tms.codec import keys
from tms.codec.values import MessageEntry
from tms.errors import TopicAlreadyExistsError, TopicNotFoundError
from tms.model import RollbackDetail, TopicId, TopicMetadata
from tms.store.tables import MessageRow, PayloadRow, PurgeCounts, TableBatch, Tables

T1, T2 = TopicId("default", "t1"), TopicId("default", "t2")


# -- MetadataTableTest ---------------------------------------------------------------------


def test_metadata_basic(tables: Tables) -> None:
    md = tables.metadata
    assert md.list_topics("default") == [] and md.scan_all() == []
    with pytest.raises(TopicNotFoundError):
        md.get(T1)
    md.create(T1, {"ttl": "10"})
    assert md.list_topics("default") == [T1]
    md.create(T2, {"ttl": "20"})
    assert md.list_topics("default") == [T1, T2]
    got = md.get(T2)
    assert (got.ttl_s, got.generation) == (20, 1)
    md.create(TopicId("system", "t3"), {})
    assert len(md.scan_all()) == 3 and md.list_topics("system") == [TopicId("system", "t3")]
    for t in (T1, T2, TopicId("system", "t3")):
        md.delete(t)
    assert md.list_topics("default") == [] and md.list_topics("system") == []


def test_metadata_generations(tables: Tables) -> None:
    md = tables.metadata
    for i in range(1, 51):
        created = md.create(T1, {"ttl": "1"})
        assert created.generation == i and md.get(T1).ttl_s == 1
        md.delete(T1)
        with pytest.raises(TopicNotFoundError):
            md.get(T1)


def test_metadata_crud(tables: Tables) -> None:
    md = tables.metadata
    with pytest.raises(TopicNotFoundError):
        md.update(T1, {"ttl": "10"})
    md.create(T1, {"ttl": "10"})
    md.update(T1, {"ttl": "30"})
    with pytest.raises(TopicAlreadyExistsError):
        md.create(T1, {"ttl": "40"})
    assert md.get(T1).ttl_s == 30
    assert md.update(T1, {}).ttl_s == 604800  # update replaces every property
    md.delete(T1)
    with pytest.raises(TopicNotFoundError):
        md.get(T1)
    with pytest.raises(TopicNotFoundError):
        md.delete(T1)


def test_scan_topics_includes_deleted(tables: Tables) -> None:
    md = tables.metadata
    md.create(TopicId("cdap", "t1"), {})
    md.create(TopicId("system", "t2"), {})
    md.delete(TopicId("cdap", "t1"))
    assert len(md.scan_all()) == 2 and md.list_topics("cdap") == []
    md.delete(TopicId("system", "t2"))
    assert [m.generation for m in md.scan_all()] == [-1, -1]


# -- MessageTableTest / PayloadTableTest ---------------------------------------------------


def rollback(tables: Tables, prefix: bytes, detail: RollbackDetail) -> int:
    """Roll back in a batch of its own, written at once; how many entries were negated."""
    batch = TableBatch()
    count = tables.messages.rollback(prefix, detail, batch)
    tables.write(batch)
    return count


def test_single_message_and_rollback(tables: Tables) -> None:
    prefix = keys.topic_prefix(T1, 1)
    tables.messages.write(prefix, [MessageRow(0, 0, MessageEntry(123, b"data"))])
    rows = list(tables.messages.scan(prefix))
    assert [(r.publish_ms, r.seq, r.entry) for r in rows] == [(0, 0, MessageEntry(123, b"data"))]
    assert tables.messages.last_position(prefix) == (0, 0)
    assert rollback(tables, prefix, RollbackDetail(123, 0, 0, 0, 0)) == 1
    assert next(tables.messages.scan(prefix)).entry == MessageEntry(-123, b"data")
    # a second rollback, or one with another write pointer, changes nothing
    assert rollback(tables, prefix, RollbackDetail(123, 0, 0, 0, 0)) == 0
    assert rollback(tables, prefix, RollbackDetail(999, 0, 0, 0, 0)) == 0


def test_rollback_touches_only_its_range_and_its_transaction(tables: Tables) -> None:
    prefix = keys.topic_prefix(T1, 1)
    rows = [MessageRow(5, seq, MessageEntry(100 + seq % 2, b"x")) for seq in range(6)]
    rows.append(MessageRow(6, 0, MessageEntry(100, b"y")))
    tables.messages.write(prefix, rows)
    assert rollback(tables, prefix, RollbackDetail(100, 5, 1, 5, 4)) == 2  # seq 2 and 4
    ptrs = [r.entry.tx_write_pointer for r in tables.messages.scan(prefix)]
    assert ptrs == [100, 101, -100, 101, -100, 101, 100]


def test_topics_and_generations_are_isolated(tables: Tables) -> None:
    for topic, gen, value in ((T1, 1, b"a"), (T1, 2, b"b"), (T2, 1, b"c")):
        tables.messages.write(
            keys.topic_prefix(topic, gen), [MessageRow(1, 0, MessageEntry(None, value))]
        )
    for topic, gen, value in ((T1, 1, b"a"), (T1, 2, b"b"), (T2, 1, b"c")):
        assert [r.entry.payload for r in tables.messages.scan(keys.topic_prefix(topic, gen))] == [
            value
        ]
    assert tables.messages.last_position(keys.topic_prefix(T1, 3)) is None


def test_payload_table_consumption_and_exclusive_start(tables: Tables) -> None:
    prefix = keys.topic_prefix(T1, 1)
    rows = [
        PayloadRow(wp, 1, i, f"{wp}-{i}".encode(), None)
        for wp in (100, 101, 102)
        for i in range(50)
    ]
    tables.payloads.write(prefix, rows)
    assert len(list(tables.payloads.scan(prefix, 100))) == 50
    assert [r.payload for r in tables.payloads.scan(prefix, 101)][:2] == [b"101-0", b"101-1"]
    assert tables.payloads.last_position(prefix, 102) == (1, 49)
    assert tables.payloads.last_position(prefix, 103) is None
    # exclusive skips the row at the start position only (CDAP skips the first row
    # whatever it is; we do not copy that quirk)
    one = [r.p_seq for r in tables.payloads.scan(prefix, 100, (1, 1), inclusive=False)]
    assert one[0] == 2 and len(one) == 48
    assert len(list(tables.payloads.scan(prefix, 100, (0, 0), inclusive=False))) == 50


def test_concurrent_writes_to_two_topics(tables: Tables) -> None:
    barrier = threading.Barrier(2)

    def writer(topic: TopicId, tag: bytes) -> None:
        prefix = keys.topic_prefix(topic, 1)
        for i in range(2):
            barrier.wait()
            tables.messages.write(prefix, [MessageRow(i, 0, MessageEntry(None, tag + bytes([i])))])

    threads = [threading.Thread(target=writer, args=(t, t.topic.encode())) for t in (T1, T2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for topic in (T1, T2):
        got = [r.entry.payload for r in tables.messages.scan(keys.topic_prefix(topic, 1))]
        assert got == [topic.topic.encode() + b"\x00", topic.topic.encode() + b"\x01"]


def expired_entries_purged_after_the_next_scan(
    tables: Tables, monkeypatch: pytest.MonkeyPatch
) -> tuple[TopicMetadata, list[PurgeCounts]]:
    """Two expired entries of transaction 100 in T1, and a purge (another instance's
    cleanup) that runs right after the next scan of the message table has read them;
    the topic and what the purge did."""
    tables.metadata.create(T1, {})
    metadata = tables.metadata.get(T1)
    prefix = keys.topic_prefix(T1, metadata.generation)
    tables.messages.write(
        prefix,
        [MessageRow(5, 0, MessageEntry(100, b"x")), MessageRow(5, 1, MessageEntry(100, b"y"))],
    )
    store, real_scan, purged = tables.messages.store, tables.messages.store.scan, []

    def scan_then_purge(*args: object, **kwargs: object) -> object:
        rows = list(real_scan(*args, **kwargs))  # type: ignore[arg-type]
        monkeypatch.setattr(store, "scan", real_scan)  # the purge's own scans are plain
        purged.append(tables.purge_topic(metadata, cutoff_ms=6, batch_rows=100))
        return iter(rows)

    monkeypatch.setattr(store, "scan", scan_then_purge)
    return metadata, purged


def test_negation_never_brings_back_an_entry_purged_after_it_was_read(
    tables: Tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two expired entries of an invalid transaction, purged right after negation
    # read them
    metadata, purged = expired_entries_purged_after_the_next_scan(tables, monkeypatch)
    # When cleanup negates the transaction's entries
    tables.negate_invalid(metadata, {100}, 0, 100)
    # Then the purged entries stay purged
    assert purged[0].expired == 2
    monkeypatch.undo()
    assert list(tables.messages.scan(keys.topic_prefix(T1, metadata.generation))) == []


def test_the_owners_rollback_never_brings_back_an_entry_purged_after_it_was_read(
    tables: Tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two expired entries of a transaction, purged right after the rollback read
    # them, on a topic owned under a fence
    metadata, purged = expired_entries_purged_after_the_next_scan(tables, monkeypatch)
    prefix = keys.topic_prefix(T1, metadata.generation)
    fence = (b"owner-" + prefix, tables.kv.acquire_fence(b"owner-" + prefix))
    # When the owner's writer rolls the transaction back in its batch, with a new entry
    batch = TableBatch()
    assert tables.messages.rollback(prefix, RollbackDetail(100, 5, 0, 5, 1), batch) == 2
    batch.append_messages(prefix, (7, 0), None, [b"z"])
    tables.write(batch, fence=fence)
    # Then the purged entries stay purged, and the rest of the batch is written
    assert purged[0].expired == 2
    monkeypatch.undo()
    assert [(r.publish_ms, r.entry.payload) for r in tables.messages.scan(prefix)] == [(7, b"z")]
