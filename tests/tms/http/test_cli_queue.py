"""``tms queue …`` against a real HTTP service (fake clock)."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

from tests.tms.http.conftest import Served
from tms.cli import main
from tms.model import TopicId


def run(served: Served, *argv: str) -> int:
    return main(["--url", served.url, *argv])


def test_queue_commands(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    assert run(served, "queue", "create", "ns", "dead") == 0
    assert run(
        served, "queue", "create", "ns", "jobs", "--lease", "1m", "--max-attempts", "2",
        "--dead-letter-queue", "dead",
    ) == 0  # fmt: skip
    assert capsys.readouterr().out == "created queue ns:dead\ncreated queue ns:jobs\n"
    props = served.service.get_topic(TopicId("ns", "jobs")).properties
    assert (props["kind"], props["lease_s"], props["max_attempts"]) == ("queue", "60", "2")
    assert props["dead_letter_queue"] == "dead"
    assert run(served, "queue", "enqueue", "ns", "jobs", "one", "two") == 0
    assert capsys.readouterr().out == "enqueued 2 message(s) to ns:jobs\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"later\n")))
    assert run(served, "queue", "enqueue", "ns", "jobs", "--delay", "5m", "--key", "k") == 0
    assert run(served, "queue", "enqueue", "ns", "jobs", "again", "--key", "k") == 0
    assert capsys.readouterr().out.splitlines() == [
        "enqueued 1 message(s) to ns:jobs",
        "enqueued 0 message(s) to ns:jobs (1 already there by key)",
    ]
    assert run(served, "queue", "receive", "ns", "jobs", "--max", "5", "-o", "json") == 0
    received = json.loads(capsys.readouterr().out)
    assert [r["attempt"] for r in received] == [1, 1]
    receipts = [r["receipt"] for r in received]
    assert run(served, "queue", "ack", "ns", "jobs", receipts[0]) == 0
    assert capsys.readouterr().out == "acked 1 receipt(s): 1 acked\n"
    assert run(served, "queue", "nack", "ns", "jobs", receipts[1], "--delay", "0") == 0
    assert capsys.readouterr().out == "returned 1 receipt(s): 1 returned\n"
    assert run(served, "queue", "receive", "ns", "jobs") == 0
    table = capsys.readouterr().out.splitlines()
    assert run(served, "queue", "ack", "ns", "jobs", receipts[1]) == 1  # delivered again since
    assert capsys.readouterr().out == "acked 1 receipt(s): 1 lease_lost\n"
    assert table[0].split() == ["RECEIPT", "ATTEMPT", "DUE", "LEASE", "UNTIL", "KEY", "PAYLOAD"]
    assert table[1].split()[1] == "2" and table[1].endswith("two")
    assert run(served, "queue", "stats", "ns", "jobs", "-o", "json") == 0
    stats = json.loads(capsys.readouterr().out)
    assert {k: stats[k] for k in ("ready", "leased", "scheduled", "acked")} == {
        "ready": 0, "leased": 1, "scheduled": 1, "acked": 1,
    }  # fmt: skip
    assert run(served, "queue", "stats", "ns", "jobs") == 0
    assert "scheduled     1" in capsys.readouterr().out
    assert run(served, "queue", "ack", "ns", "jobs", "not-a-receipt") == 1
    assert "not a receipt" in capsys.readouterr().err
