"""``txn.clikit``: the conventions both command lines share."""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Iterator

import pytest

from txn.clikit import (
    Column,
    emit,
    emit_object,
    escape_payload,
    format_bytes,
    format_duration,
    format_rate,
    format_time,
    parse_duration,
    parse_time,
)

MS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z


@pytest.fixture
def in_paris(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_times_are_iso_8601_in_local_time_or_utc(in_paris: None) -> None:
    assert format_time(MS) == "2023-11-14T23:13:20.123+01:00"
    assert format_time(MS, utc=True) == "2023-11-14T22:13:20.123Z"
    assert format_time(None) == "-"


def test_times_are_read_as_ms_or_iso_8601(in_paris: None) -> None:
    assert parse_time(str(MS)) == MS
    assert parse_time("2023-11-14T22:13:20.123Z") == MS
    assert parse_time("2023-11-14T23:13:20.123") == MS  # naive: local time
    assert parse_time("2023-11-14T23:13:20.123+01:00") == MS
    assert parse_time(format_time(MS)) == MS
    with pytest.raises(ValueError, match="not a time"):
        parse_time("yesterday")


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5", "5w", "", "1.5h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_values_for_people() -> None:
    assert [format_duration(s) for s in (604800, 5400, 45, 3600)] == ["7d", "90m", "45s", "1h"]
    assert [format_bytes(n) for n in (512, 1536, 10 * 2**20)] == ["512 B", "1.5 KiB", "10 MiB"]
    assert [format_rate(r) for r in (0, 12.5, 3456)] == ["0", "12.5/s", "3.46k/s"]


@pytest.mark.parametrize(
    ("payload", "shown"),
    [
        (b"plain text", "plain text"),
        ("café ☕".encode(), "café ☕"),
        (b"two\nlines\ttab\r", "two\\nlines\\ttab\\r"),
        (b"\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),  # no terminal escapes get through
        (b"\x00\xff\xfe", "\\x00\\xff\\xfe"),  # not UTF-8
        (b"back\\slash \\x41", "back\\\\slash \\\\x41"),  # a literal \\x41 stays tellable
        ("\u202egnp.exe".encode(), "\\u202egnp.exe"),  # bidi override
    ],
)
def test_payloads_show_safely(payload: bytes, shown: str) -> None:
    assert escape_payload(payload) == shown


COLUMNS = (Column("NAME", "name"), Column("SIZE", "size", "bytes"), Column("AT", "at", "time"))
RECORDS = [{"name": "a", "size": 2048, "at": MS}, {"name": "bb", "size": None, "at": None}]


def test_tables_align_and_render_by_kind() -> None:
    out = io.StringIO()
    emit(argparse.Namespace(output="table", utc=True), RECORDS, COLUMNS, out=out)
    assert out.getvalue().splitlines() == [
        "NAME   SIZE  AT",
        "a     2 KiB  2023-11-14T22:13:20.123Z",
        "bb        -  -",
    ]


def test_json_output_keeps_raw_values() -> None:
    out = io.StringIO()
    emit(argparse.Namespace(output="json"), RECORDS, COLUMNS, out=out)
    assert json.loads(out.getvalue()) == RECORDS
    out = io.StringIO()
    emit(argparse.Namespace(output="json"), RECORDS, COLUMNS, out=out, stream=True)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == RECORDS


def test_objects_show_as_field_value_lines() -> None:
    out = io.StringIO()
    record = {"status": "OK", "at": MS, "extra": "x\ny"}
    emit_object(argparse.Namespace(output="table", utc=True), record, COLUMNS[2:], out=out)
    assert out.getvalue().splitlines() == [
        "AT      2023-11-14T22:13:20.123Z",
        "status  OK",
        "extra   x\\ny",
    ]
