"""``tms subscriptions …``, ``tms tail --subscription`` and the lag in ``tms top``
against a real HTTP service."""

from __future__ import annotations

import json

import pytest

from tests.tms.http.conftest import Served
from tms.cli import main
from tms.model import StoreRequest, TopicId
from tms.subscription import Preferences, SubscriptionId

T = TopicId("ns", "t")


def run(served: Served, *argv: str) -> int:
    return main(["--url", served.url, *argv])


@pytest.fixture
def topic(served: Served) -> Served:
    served.service.create_topic(T)
    served.service.publish(StoreRequest.of(T, ["order:1", "audit:1", "order:2"]))
    return served


def test_create_list_get_seek_delete(topic: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(topic, "subscriptions", "create", "ns", "t", "mailer") == 0
    assert capsys.readouterr().out == (f"created subscription ns:t:mailer at {'0' * 40} (lag 3)\n")
    assert run(topic, "subscriptions", "create", "ns", "t", "audit", "--start", "latest",
               "--filter-prefix", "audit:") == 0  # fmt: skip
    capsys.readouterr()
    assert run(topic, "subscriptions", "list", "ns", "t", "-o", "json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["lag"]["messages"]) for s in listed] == [("audit", 0), ("mailer", 3)]
    assert listed[0]["preferences"]["filter"] == {"payloadPrefixes": ["YXVkaXQ6"]}
    assert run(topic, "subscriptions", "list", "ns", "t") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "LAG", "POSITION", "VERSION", "UPDATED", "READS", "FILTER"]
    assert table[2].split()[:2] == ["mailer", "3"]
    assert run(topic, "subscriptions", "get", "ns", "t", "mailer") == 0
    shown = capsys.readouterr().out
    assert "subscription  ns:t:mailer" in shown and "lag           3" in shown
    assert run(topic, "subscriptions", "seek", "ns", "t", "mailer", "--latest") == 0
    assert capsys.readouterr().out.startswith("moved subscription ns:t:mailer to ")
    assert topic.service.subscriptions.get(SubscriptionId(T, "mailer")).lag.messages == 0  # type: ignore[union-attr]
    assert run(topic, "subscriptions", "seek", "ns", "t", "mailer", "--earliest",
               "--version", "1") == 1  # fmt: skip
    assert "changed since it was read" in capsys.readouterr().err
    assert run(topic, "subscriptions", "delete", "ns", "t", "mailer") == 0
    assert capsys.readouterr().out == "deleted subscription ns:t:mailer\n"
    assert run(topic, "subscriptions", "get", "ns", "t", "mailer") == 1
    assert "does not exist" in capsys.readouterr().err


def test_tail_through_a_subscription_resumes_where_it_stopped(
    topic: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    topic.service.subscriptions.create(SubscriptionId(T, "reader"), Preferences())
    assert run(topic, "tail", "ns", "t", "--subscription", "reader", "--count", "2") == 0
    first = [line.split(maxsplit=2)[2] for line in capsys.readouterr().out.splitlines()]
    assert run(topic, "tail", "ns", "t", "--subscription", "reader", "--count", "1") == 0
    second = [line.split(maxsplit=2)[2] for line in capsys.readouterr().out.splitlines()]
    assert first + second == ["order:1", "audit:1", "order:2"]
    assert topic.service.subscriptions.get(SubscriptionId(T, "reader")).lag.messages == 0  # type: ignore[union-attr]


def test_tail_of_a_transactional_subscription_needs_a_transaction_server(
    topic: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(topic, "subscriptions", "create", "ns", "t", "tx", "--transactional") == 0
    capsys.readouterr()
    assert run(topic, "tail", "ns", "t", "--subscription", "tx", "--count", "1") == 1
    assert "--tx-server" in capsys.readouterr().err


def test_top_shows_the_largest_lag(topic: Served, capsys: pytest.CaptureFixture[str]) -> None:
    run(topic, "subscriptions", "create", "ns", "t", "behind")
    run(topic, "subscriptions", "create", "ns", "t", "ahead", "--start", "latest")
    capsys.readouterr()
    assert run(topic, "top", "ns", "--once") == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[3].split()
    assert header[-4:] == ["AGO", "SUBS", "MAX", "LAG"]
    assert lines[4].split()[-2:] == ["2", "3"]
