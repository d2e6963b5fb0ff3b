"""The ``tms`` client commands against a real HTTP service."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.tms.http.conftest import Served
from tms.cli import main
from tms.model import StoreRequest, TopicId


def run(served: Served, *argv: str) -> int:
    return main(["--url", served.url, *argv])


def test_topic_commands(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(served, "topics", "create", "ns", "t1", "--ttl", "60", "--property", "owner=me") == 0
    assert capsys.readouterr().out == "created topic ns:t1 (owner=me, ttl 1m)\n"
    assert run(served, "topics", "create", "ns", "t2") == 0
    assert capsys.readouterr().out == "created topic ns:t2 (ttl 7d)\n"
    assert run(served, "topics", "list", "ns") == 0
    assert capsys.readouterr().out == "TOPIC\nt1\nt2\n"
    assert run(served, "topics", "list", "ns", "--output", "json") == 0
    assert json.loads(capsys.readouterr().out) == [{"topic": "t1"}, {"topic": "t2"}]
    assert run(served, "topics", "get", "ns", "t1", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == {"generation": "1", "owner": "me", "ttl": "60"}
    assert run(served, "topics", "get", "ns", "t1") == 0
    assert capsys.readouterr().out.split("\n") == [
        "topic       ns:t1",
        "ttl         1m",
        "generation  1",
        "owner       me",
        "",
    ]
    assert run(served, "topics", "update", "ns", "t1", "--ttl", "90m") == 0
    assert capsys.readouterr().out == "updated topic ns:t1 (ttl 90m)\n"
    assert served.service.get_topic(TopicId("ns", "t1")).ttl_s == 90 * 60
    assert run(served, "topics", "delete", "ns", "t2") == 0
    assert capsys.readouterr().out == "deleted topic ns:t2\n"
    assert run(served, "topics", "create", "ns", "t1") == 1
    assert "already exists" in capsys.readouterr().err
    assert run(served, "topics", "create", "ns", "t3", "--property", "novalue") == 1


def test_publish_tail_inspect(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    topic = TopicId("ns", "t")
    served.service.create_topic(topic)
    assert run(served, "publish", "ns", "t", "one", "two") == 0
    assert capsys.readouterr().out == "published 2 messages to ns:t\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"three\nfour\r\n")))
    assert run(served, "publish", "ns", "t", "--batch", "1") == 0
    assert capsys.readouterr().out.startswith("published 2 messages (9 B) to ns:t in ")
    detail = served.service.publish(StoreRequest.of(topic, ["undone"], tx_write_pointer=7))
    assert detail is not None
    served.service.rollback(topic, detail)
    assert run(served, "tail", "ns", "t", "--from-start", "--count", "5") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(maxsplit=2)[2] for line in lines] == [
        "one",
        "two",
        "three",
        "four",
        "undone",
    ]
    assert (
        run(
            served,
            "tail",
            "ns",
            "t",
            "--from-id",
            lines[3].split()[1],
            "--count",
            "1",
            "--format",
            "json",
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    assert record["id"] == lines[3].split()[1]
    assert run(served, "inspect", "ns", "t") == 0
    out = capsys.readouterr().out
    assert "generation 1 (live)" in out and "ROLLED BACK" in out and out.count("\nmessage") == 5
    assert run(served, "inspect", "ns", "t", "--json", "--limit", "2") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["truncated"] and len(report["rows"]) == 2


def test_unreachable_service_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "http://127.0.0.1:1", "topics", "list", "ns"]) == 1
    assert capsys.readouterr().err.startswith("tms:")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens on it now


CLIENT_ERRORS: list[tuple[str, Callable[[str, int], list[str]], list[str]]] = [
    ("service down", lambda url, p: ["--url", f"http://127.0.0.1:{p}", "topics", "list", "ns"], ["127.0.0.1"]),
    ("tail, service down", lambda url, p: ["--url", f"http://127.0.0.1:{p}", "tail", "ns", "t"], ["127.0.0.1"]),
    ("tail, tx server down", lambda url, p: ["--url", url, "tail", "ns", "t", "--tx-server", f"127.0.0.1:{p}"], ["transaction server", "127.0.0.1:"]),
    ("tail, bad tx server", lambda url, p: ["--url", url, "tail", "ns", "t", "--tx-server", "nohost"], ["transaction server"]),
    ("tail, unknown topic", lambda url, p: ["--url", url, "tail", "ns", "nope"], ["does not exist"]),
    ("tail, bad id", lambda url, p: ["--url", url, "tail", "ns", "t", "--from-id", "zz"], ["hex"]),
    ("publish, unknown topic", lambda url, p: ["--url", url, "publish", "ns", "nope", "x"], ["does not exist"]),
    ("bad topic name", lambda url, p: ["--url", url, "topics", "create", "ns", "a.b"], ["topic"]),
    ("inspect, no such topic", lambda url, p: ["--url", url, "inspect", "ns", "nope"], ["does not exist"]),
    ("not an http URL", lambda url, p: ["--url", "ftp://x", "topics", "list", "ns"], ["not an http"]),
    ("missing CA bundle", lambda url, p: ["--url", "https://127.0.0.1:1", "--ca-bundle", "/none.pem", "topics", "list", "ns"], ["CA bundle"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "argv", "words"), CLIENT_ERRORS, ids=[c[0] for c in CLIENT_ERRORS]
)
def test_client_errors_are_one_line_and_exit_1(
    served: Served, name: str, argv: Callable[[str, int], list[str]], words: list[str]
) -> None:
    served.service.create_topic(TopicId("ns", "t"))
    result = subprocess.run(
        [sys.executable, "-m", "tms.cli", *argv(served.url, _closed_port())],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("tms: ")
    for word in words:
        assert word in line
