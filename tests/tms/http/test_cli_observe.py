"""``tms topics stats``, ``tms top`` and ``tms metrics`` against a real service."""

from __future__ import annotations

import json

import pytest

from tests.tms.http.conftest import NOW, Served
from tms.cli import main
from tms.model import StoreRequest, TopicId


def run(served: Served, *argv: str) -> int:
    return main(["--url", served.url, *argv])


@pytest.fixture
def topics(served: Served) -> Served:
    a, b = TopicId("ns", "alpha"), TopicId("ns", "beta")
    served.service.create_topic(a, {"ttl": "3600"})
    served.service.create_topic(b)
    served.service.publish(StoreRequest.of(a, [b"x" * 100] * 3))
    served.clock.advance(500)
    served.service.publish(StoreRequest.of(a, [b"y" * 50]))
    return served


def test_stats_match_the_api(topics: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(topics, "topics", "stats", "ns", "-o", "json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == [s.to_json() for s in topics.service.namespace_stats("ns")]
    alpha = listed[0]
    assert (alpha["topic"], alpha["messages"], alpha["payloadBytes"]) == ("alpha", 4, 350)
    assert (alpha["firstPublishTime"], alpha["lastPublishTime"]) == (NOW, NOW + 500)
    assert run(topics, "topics", "stats", "ns", "alpha", "--utc") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["TOPIC", "MESSAGES", "BYTES"]
    assert row.split()[:4] == ["alpha", "4", "350", "B"]
    assert "2023-11-14T22:13:20.000Z" in row and "2023-11-14T22:13:20.500Z" in row
    assert row.split()[-1] == "1h"


def test_stats_of_an_unknown_topic(topics: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(topics, "topics", "stats", "ns", "nope") == 1
    assert "does not exist" in capsys.readouterr().err


def test_top_draws_frames_with_rates(topics: Served, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("top", "ns", "--iterations", "2", "--interval", "0.1", "--sort", "messages")
    assert run(topics, *argv) == 0
    frames = capsys.readouterr().out.split("\n\ntms top")
    assert len(frames) == 2  # not a terminal: no screen clearing, frames one after another
    lines = frames[1].splitlines()
    assert lines[1].startswith("2 topics, 4 messages")
    header = lines[3].split()
    assert header[:3] == ["TOPIC", "MESSAGES", "BYTES"] and "NOW" in header
    assert lines[4].split()[:2] == ["alpha", "4"] and lines[5].split()[:2] == ["beta", "0"]


def test_metrics_lists_what_the_service_exports(
    topics: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(topics, "metrics", "--match", "tms_published_messages", "-o", "json") == 0
    samples = json.loads(capsys.readouterr().out)
    published = {s["labels"]: s["value"] for s in samples}
    assert published["namespace=ns,op=write,topic=alpha"] == 4.0
    assert run(topics, "metrics") == 0
    out = capsys.readouterr().out
    assert "tms_topic_bytes" in out and "_bucket" not in out
