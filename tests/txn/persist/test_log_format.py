"""The framed log format: golden bytes, and what recovery does with damage — a corrupt
byte anywhere but in the last batch stops it naming the file and offset; a torn last
batch (cut anywhere) is dropped and the file cut back."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.txn.persist.strategies import edits
from txn.errors import CorruptStateError
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_record
from txn.persist.log_codec import (
    FILE_HEADER,
    FRAME_HEADER_SIZE,
    CorruptLogError,
    LogReader,
    crc32c,
    encode_frame,
    encode_frames,
    encode_log,
)
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.persist.wal import WriteAheadLog
from txn.transaction import TransactionType

TS = 1000


def started(wp: int) -> TransactionEdit:
    return TransactionEdit.started(wp, wp - 1, 10**13, TransactionType.SHORT)


def written_log(batches: list[list[TransactionEdit]]) -> tuple[bytes, list[int]]:
    """The bytes the real write-ahead log leaves for ``batches`` (each flushed and synced
    on its own) and the file offset where each batch's frame starts."""
    storage = MemoryStorage()
    wal = WriteAheadLog(TransactionStateStore(storage))
    wal.open(TS)
    starts = []
    for batch in batches:
        starts.append(max(len(storage.logs[TS]), len(FILE_HEADER)))
        for e in batch:
            wal.append(e)
        wal.flush()
    wal.close()
    return bytes(storage.logs[TS]), starts


def recover(data: bytes) -> tuple[list[TransactionEdit], bytes]:
    """Replay ``data`` as ``txlog.1000``; return the edits and the file afterwards."""
    storage = MemoryStorage()
    storage.logs[TS] = bytearray(data)
    replayed = list(TransactionStateStore(storage).edits_since(0))
    return replayed, bytes(storage.logs[TS])


# -- golden bytes -------------------------------------------------------------------------


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value


def test_frame_golden_bytes() -> None:
    header = (
        b"\xf1TXB"  # magic
        + (9).to_bytes(4, "big")  # payload length
        + (8).to_bytes(8, "big")  # bytes of the file durable before this frame
        + (0xE3069283).to_bytes(4, "big")  # CRC32C of the payload
    )
    assert crc32c(header) == 0x6A3E9823
    assert encode_frame(b"123456789", 8) == header + bytes.fromhex("6a3e9823") + b"123456789"


def test_file_golden_bytes() -> None:
    record = encode_record(0, TransactionEdit.invalid(7))
    assert FILE_HEADER == b"TXMSLOG\x01"
    assert encode_log([TransactionEdit.invalid(7)]) == FILE_HEADER + encode_frame(record, 0)
    assert encode_log([]) == FILE_HEADER


def test_the_writer_frames_each_batch_and_says_what_was_durable() -> None:
    data, starts = written_log([[started(11), started(12)], [started(13)]])
    first = encode_frame(encode_record(0, started(11)) + encode_record(1, started(12)), 0)
    second = encode_frame(encode_record(2, started(13)), len(FILE_HEADER) + len(first))
    assert data == FILE_HEADER + first + second
    assert starts == [len(FILE_HEADER), len(FILE_HEADER) + len(first)]


def test_large_batches_are_split_into_frames() -> None:
    records = [encode_record(i, started(100 + i)) for i in range(5)]
    data = FILE_HEADER + encode_frames(records, 0, max_payload=2 * len(records[0]))
    reader = LogReader(data)
    assert [e.write_pointer for e in reader] == [100, 101, 102, 103, 104]
    assert data.count(b"\xf1TXB") == 3 and reader.torn_at is None


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(edits, min_size=1, max_size=4), min_size=1, max_size=5))
def test_round_trip(batches: list[list[TransactionEdit]]) -> None:
    data, _starts = written_log(batches)
    replayed, after = recover(data)
    assert replayed == [e for batch in batches for e in batch]
    assert after == data


# -- damage -------------------------------------------------------------------------------

BATCHES = [[started(10 + 3 * i + j) for j in range(3)] for i in range(4)]
LOG, STARTS = written_log(BATCHES)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_corrupt_byte_before_the_last_batch_stops_recovery(data: st.DataObject) -> None:
    # Given a log of four synced batches
    # When one byte anywhere before the last batch is changed
    pos = data.draw(st.integers(0, STARTS[-1] - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(LOG)
    damaged[pos] ^= flip
    # Then recovery refuses, naming the file and where the damaged batch starts
    with pytest.raises(CorruptStateError) as err:
        recover(bytes(damaged))
    damaged_frame = 0 if pos < len(FILE_HEADER) else max(s for s in STARTS if s <= pos)
    expected = f"txlog.{TS} in memory is corrupt at byte {damaged_frame} of {len(LOG)}"
    assert expected in str(err.value)


def test_every_position_before_the_last_batch_is_checked() -> None:
    for pos in range(STARTS[-1]):
        damaged = bytearray(LOG)
        damaged[pos] ^= 0x40
        with pytest.raises(CorruptStateError):
            recover(bytes(damaged))


@pytest.mark.parametrize("cut", range(STARTS[-1], len(LOG)))
def test_a_torn_last_batch_is_dropped_and_the_file_cut_back(cut: int) -> None:
    replayed, after = recover(LOG[:cut])
    assert replayed == [e for batch in BATCHES[:-1] for e in batch]
    assert after == LOG[: STARTS[-1]]


@pytest.mark.parametrize("cut", range(1, len(FILE_HEADER) + FRAME_HEADER_SIZE + 8))
def test_a_log_torn_in_its_first_batch_is_emptied(cut: int) -> None:
    data, _starts = written_log([[started(5)]])
    replayed, after = recover(data[:cut])
    assert replayed == []
    assert after == (data[: len(FILE_HEADER)] if cut >= len(FILE_HEADER) else b"")


@pytest.mark.parametrize("tail", [b"\x00" * 4096, b"\xf1TXB" + b"\x00" * 30, b"\xff" * 7])
def test_garbage_after_the_last_batch_is_a_torn_tail(tail: bytes) -> None:
    replayed, after = recover(LOG + tail)
    assert len(replayed) == 12 and after == LOG


def test_a_damaged_last_batch_is_torn() -> None:
    damaged = bytearray(LOG)
    damaged[-3] ^= 1
    replayed, after = recover(bytes(damaged))
    assert len(replayed) == 9 and after == LOG[: STARTS[-1]]


def test_unsynced_batches_after_a_damaged_one_are_torn_too() -> None:
    # Given two batches written back to back before either was synced (pipelined syncs):
    # the second says only the file header was durable when it was written
    records = [encode_record(i, started(20 + i)) for i in range(4)]
    synced_part = FILE_HEADER + encode_frame(records[0], 0)
    unsynced_1 = encode_frame(records[1] + records[2], len(synced_part))
    unsynced_2 = encode_frame(records[3], len(synced_part))
    damaged = bytearray(synced_part + unsynced_1 + unsynced_2)
    # When the first of them has a hole (a crash before its sync) but the second is whole
    damaged[len(synced_part) + FRAME_HEADER_SIZE + 2] ^= 0xFF
    # Then nothing after the synced part was acknowledged: both are dropped
    replayed, after = recover(bytes(damaged))
    assert [e.write_pointer for e in replayed] == [20]
    assert after == synced_part


def test_a_later_frame_that_saw_the_damage_synced_makes_it_corruption() -> None:
    records = [encode_record(i, started(20 + i)) for i in range(3)]
    first = FILE_HEADER + encode_frame(records[0], 0)
    second = encode_frame(records[1], len(first))
    third = encode_frame(records[2], len(first) + len(second))
    damaged = bytearray(first + second + third)
    damaged[len(first) + 1] ^= 0xFF  # the second frame's header
    reader = LogReader(bytes(damaged))
    with pytest.raises(CorruptLogError) as err:
        list(reader)
    assert err.value.offset == len(first)


def test_frames_inside_a_payload_are_not_taken_for_frames() -> None:
    # A change key shaped like a whole frame claiming the file durable far beyond
    fake = encode_frame(b"x", 10**9)
    edit = TransactionEdit.committing(30, frozenset({fake}))
    records = [encode_record(0, started(30)), encode_record(1, edit)]
    first = FILE_HEADER + encode_frame(records[0], 0)
    last = encode_frame(records[1], len(first))
    # When the last frame is cut inside its payload (its header is sound)
    replayed, after = recover(first + last[:-3])
    # Then it is a torn tail, not corruption
    assert [e.write_pointer for e in replayed] == [30] and after == first


def test_a_sound_frame_with_an_undecodable_record_is_corruption() -> None:
    first = FILE_HEADER + encode_frame(encode_record(0, started(5)), 0)
    data = first + encode_frame(b"\x00" * 8 + b"\x7f", len(first))
    with pytest.raises(CorruptLogError) as err:
        list(LogReader(data))
    assert err.value.offset == len(first) + FRAME_HEADER_SIZE


def test_tephras_format_is_still_read() -> None:
    data = b"".join(encode_record(i, started(40 + i)) for i in range(3))
    reader = LogReader(data)
    assert [e.write_pointer for e in reader] == [40, 41, 42]
    assert not reader.framed and reader.torn_at is None


def test_split_flushes_record_only_what_finished_syncing() -> None:
    storage = MemoryStorage()
    wal = WriteAheadLog(TransactionStateStore(storage))
    wal.open(TS)

    def frame_synced(start: int) -> int:
        return int.from_bytes(storage.logs[TS][start + 8 : start + 16], "big")

    wal.append(started(1))
    first = wal.start_flush()
    assert first is not None
    # Given a second batch written while the first is still syncing
    second_start = len(storage.logs[TS])
    wal.append(started(2))
    second = wal.start_flush()
    assert second is not None
    # Then it claims nothing beyond the file header as durable
    assert frame_synced(len(FILE_HEADER)) == 0 and frame_synced(second_start) == 0
    wal.finish_flush(first, None)
    wal.finish_flush(second, None)
    # And a batch written after both finished claims both
    third_start = len(storage.logs[TS])
    wal.append(started(3))
    third = wal.start_flush()
    assert third is not None
    assert frame_synced(third_start) == third_start
    wal.finish_flush(third, None)
    wal.close()
