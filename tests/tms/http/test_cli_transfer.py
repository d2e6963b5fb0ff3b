"""``tms export`` / ``tms import`` against a real service: round trips through JSON
lines and Avro container files keep order and payloads (binary ones and commit-marker
payloads too), progress shows rates, and a bad file publishes nothing."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import fastavro
import pytest

from tests.tms.http.conftest import Served
from tms.cli import main
from tms.model import StoreRequest, TopicId

SOURCE, COPY = TopicId("ns", "source"), TopicId("ns", "copy")
PAYLOADS = [b"first", b"\x00\xff binary \x1b[0m", "caf\u00e9".encode(), b"", b"x" * 5000]


def run(served: Served, *argv: str) -> int:
    return main(["--url", served.url, *argv])


def payloads(served: Served, topic: TopicId) -> list[bytes]:
    return [m.payload for m in served.service.fetch(topic).messages]


@pytest.fixture
def source(served: Served) -> Served:
    svc = served.service
    svc.create_topic(SOURCE)
    svc.create_topic(COPY)
    svc.publish(StoreRequest.of(SOURCE, PAYLOADS[:3]))
    served.clock.advance(10)
    wp = served.clock.now_ms() * 1_000_000
    svc.store(StoreRequest.of(SOURCE, PAYLOADS[3:], tx_write_pointer=wp))
    svc.publish(StoreRequest.of(SOURCE, [], tx_write_pointer=wp))  # a commit marker
    return served


@pytest.mark.parametrize("suffix", [".jsonl", ".avro"])
def test_round_trip_keeps_order_and_payloads(
    source: Served, tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"dump{suffix}"
    assert run(source, "export", "ns", "source", str(path)) == 0
    fmt = "avro" if suffix == ".avro" else "jsonl"
    assert f"exported 5 messages (4.91 KiB) of ns:source to {path} ({fmt})" in (
        capsys.readouterr().out
    )
    assert run(source, "import", "ns", "copy", str(path), "--batch", "2") == 0
    said = capsys.readouterr().out
    assert said.startswith(f"imported 5 messages (4.91 KiB) into ns:copy from {path}")
    assert "order and payloads kept, ids and publish times are new" in said
    assert payloads(source, COPY) == PAYLOADS


def test_the_files_are_what_other_tools_read(source: Served, tmp_path: Path) -> None:
    originals = source.service.fetch(SOURCE).messages
    assert run(source, "export", "ns", "source", str(tmp_path / "m.jsonl")) == 0
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "id": m.id_hex,
            "publishTime": m.publish_ms,
            "payload": base64.b64encode(m.payload).decode(),
        }
        for m in originals
    ]
    assert run(source, "export", "ns", "source", str(tmp_path / "m.avro")) == 0
    with (tmp_path / "m.avro").open("rb") as f:
        reader = fastavro.reader(f)
        assert reader.metadata["txms.topic"] == "ns:source"
        records = list(reader)
    assert [(r["id"], r["payload"]) for r in records] == [
        (m.id_bytes, m.payload) for m in originals
    ]
    assert [int(r["publishTime"].timestamp() * 1000) for r in records] == [
        m.publish_ms for m in originals
    ]


def test_export_ranges_and_stdout(source: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(source, "export", "ns", "source", "-", "--limit", "2") == 0
    captured = capsys.readouterr()
    assert [base64.b64decode(json.loads(x)["payload"]) for x in captured.out.splitlines()] == (
        PAYLOADS[:2]
    )
    assert "exported 2 messages" in captured.err  # stdout holds the data
    first_id = source.service.fetch(SOURCE).messages[2].id_hex
    assert run(source, "export", "ns", "source", "-", "--from-id", first_id) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_progress_shows_counts_and_rates(
    source: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(source, "export", "ns", "source", str(tmp_path / "p.jsonl"), "--progress") == 0
    err = capsys.readouterr().err
    assert "export ns:source" in err and "5/5" in err and "msg/s" in err
    assert run(source, "import", "ns", "copy", str(tmp_path / "p.jsonl"), "--progress") == 0
    assert "msg/s" in capsys.readouterr().err


def test_a_bad_file_publishes_nothing(
    source: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"payload": base64.b64encode(b"ok").decode()})
    bad.write_text(f"{good}\n{good}\n{{not json\n")
    assert run(source, "import", "ns", "copy", str(bad)) == 1
    assert "line 3" in capsys.readouterr().err
    assert payloads(source, COPY) == []
    not_avro = tmp_path / "bad.avro"
    not_avro.write_bytes(b"plain bytes")
    assert run(source, "import", "ns", "copy", str(not_avro)) == 1
    assert "not an Avro" in capsys.readouterr().err
    assert payloads(source, COPY) == []


def test_import_from_stdin(
    source: Served, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = "".join(json.dumps({"payload": base64.b64encode(p).decode()}) + "\n" for p in PAYLOADS)
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    assert run(source, "import", "ns", "copy", "-") == 0
    assert "from stdin" in capsys.readouterr().out
    assert payloads(source, COPY) == PAYLOADS


def test_import_into_an_unknown_topic(
    source: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.jsonl"
    assert run(source, "export", "ns", "source", str(path)) == 0
    assert run(source, "import", "ns", "nope", str(path)) == 1
    assert "does not exist" in capsys.readouterr().err
