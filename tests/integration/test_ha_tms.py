"""Several ``tms serve --zookeeper ... --store postgresql://...`` processes on a 3-node
ZooKeeper ensemble and PostgreSQL (``tests/engines.py``; skipped without the packages):
one owner per topic, redirects to it, reads anywhere, an owner paused with SIGSTOP
past its session that must not append once another instance took over, and the
subscription records in ZooKeeper."""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tms.cli import main as tms_main
from tms.client import MessagingClient
from tms.cluster.ownership import connect
from tms.errors import BadVersionError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import EARLIEST, Preferences, Start, SubscriptionId, after
from txms_testing import ServiceProcess, ZooKeeperEnsemble

SESSION_S = 2.0
TOPIC = "/v1/namespaces/ns/topics/orders"
_bases = itertools.count(1)


def tms_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tms.cli", "--log-level", "INFO", *args]


@dataclass
class TmsCluster:
    zk: ZooKeeperEnsemble
    store_url: str
    base: str
    procs: list[ServiceProcess] = field(default_factory=list)

    def serve(self, name: str, *extra: str) -> tuple[ServiceProcess, str]:
        argv = tms_command(
            "serve", "--port", "0", "--store", self.store_url,
            "--zookeeper", self.zk.connect_string, "--zk-path", self.base,
            "--name", name, "--session-timeout-s", str(SESSION_S), *extra,
        )  # fmt: skip
        proc = ServiceProcess(argv, name).start()
        self.procs.append(proc)
        url = proc.wait_for(r"listening on (http://[\d.]+:\d+)", 60).group(1)
        return proc, url

    def serve_rpc(self, name: str) -> tuple[ServiceProcess, str, str]:
        """An instance serving the binary protocol too: its process, URL and tms:// URL."""
        proc, url = self.serve(name, "--rpc-port", "0")
        return proc, url, proc.wait_for(r"binary protocol listening on (tms://\S+)", 60).group(1)


@pytest.fixture
def cluster(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[TmsCluster]:
    c = TmsCluster(zk_ensemble, pg_url, f"/tmstest{next(_bases)}/tms")
    yield c
    for proc in c.procs:
        proc.kill()


def publish_body(*payloads: bytes) -> dict[str, Any]:
    return {"messages": [base64.b64encode(p).decode() for p in payloads]}


def read_all(url: str) -> list[tuple[str, bytes]]:
    answer = requests.post(f"{url}{TOPIC}/poll", json={"limit": 10_000}, timeout=30)
    answer.raise_for_status()
    return [(m["id"], base64.b64decode(m["payload"])) for m in answer.json()["messages"]]


def test_any_instance_takes_writes_by_redirect_and_serves_reads(
    cluster: TmsCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    _a, url_a = cluster.serve("a")
    _b, url_b = cluster.serve("b")
    # a write at b of a topic nobody owns: b claims it
    assert requests.put(f"{url_b}{TOPIC}", json={}, timeout=30).status_code == 200
    redirected = requests.post(
        f"{url_a}{TOPIC}/publish", json=publish_body(b"1"), timeout=30, allow_redirects=False
    )
    assert redirected.status_code == 307
    assert redirected.headers["Location"] == f"{url_b}{TOPIC}/publish"
    assert redirected.json()["error"] == "not_owner"
    # an HTTP client that follows redirects is sent on to the owner with the same body
    followed = requests.post(f"{url_a}{TOPIC}/publish", json=publish_body(b"1"), timeout=30)
    assert followed.status_code == 200 and followed.history[0].status_code == 307
    assert [p for _i, p in read_all(url_a)] == [b"1"] == [p for _i, p in read_all(url_b)]
    status = requests.get(f"{url_a}/v1/cluster", timeout=30).json()
    assert status["mode"] == "cluster" and status["self"]["id"] == "a"
    assert [i["id"] for i in status["instances"]] == ["a", "b"]
    assert status["owners"] == {"ns.orders": "b"}
    # a long-poll on a wakes on a publish through b (the owner)
    polled: list[list[bytes]] = []

    def long_poll() -> None:
        last = read_all(url_a)[-1][0]
        answer = requests.post(
            f"{url_a}{TOPIC}/poll?wait_ms=60000",
            json={"startFrom": last, "inclusive": False},
            timeout=90,
        )
        polled.append([base64.b64decode(m["payload"]) for m in answer.json()["messages"]])

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(0.5)  # (so the poll is waiting: the test passes without it, proving less)
    requests.post(f"{url_b}{TOPIC}/publish", json=publish_body(b"woke"), timeout=30)
    poller.join(90)
    assert polled == [[b"woke"]]
    # the command line and the client take several URLs, and pass an unreachable one by
    dead = "http://127.0.0.1:1"
    assert tms_main(["--url", f"{dead},{url_a}", "cluster", "status", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(i["id"], i["url"], i["owned"], i["answered"]) for i in shown] == [
        ("a", url_a, [], "yes"),
        ("b", url_b, ["ns.orders"], ""),
    ]
    with MessagingClient([dead, url_a]) as client:
        client.publish(TopicId("ns", "orders"), [b"2"])  # followed a's 307 to b
        read = [m[1] for m in client.poll(TopicId("ns", "orders")).messages]
        assert read == [b"1", b"woke", b"2"]


def test_a_paused_owner_never_appends_after_another_instance_took_over(
    cluster: TmsCluster,
) -> None:
    # Given a owning the topic with acknowledged messages, and b
    a, url_a = cluster.serve("a")
    _b, url_b = cluster.serve("b")
    assert requests.put(f"{url_a}{TOPIC}", json={}, timeout=30).status_code == 200
    for n in range(5):
        answer = requests.post(f"{url_a}{TOPIC}/publish", json=publish_body(b"a%d" % n), timeout=30)
        assert answer.status_code == 200
    # When a is paused past its session, with a publish waiting in its socket
    host, port = url_a.removeprefix("http://").split(":")
    direct = http.client.HTTPConnection(host, int(port), timeout=120)
    direct.connect()
    a.pause()
    outcome: list[int] = []

    def publish_to_the_paused_owner() -> None:
        body = json.dumps(publish_body(b"stale")).encode()
        direct.request("POST", f"{TOPIC}/publish", body, {"Content-Type": "application/json"})
        outcome.append(direct.getresponse().status)

    caller = threading.Thread(target=publish_to_the_paused_owner)
    caller.start()
    # and b takes the topic over once ZooKeeper expired a's session
    deadline = time.monotonic() + 60
    while True:
        answer = requests.post(
            f"{url_b}{TOPIC}/publish", json=publish_body(b"b0"), timeout=30, allow_redirects=False
        )
        if answer.status_code == 200:
            break
        assert answer.status_code in (307, 503), answer.text
        assert time.monotonic() < deadline, "b never took the topic over"
        time.sleep(0.2)
    # and then a resumes
    mark = len(a.lines)
    a.resume()
    caller.join(60)
    a.wait_for("no longer owning|giving up", 60, since=mark)
    # Then a answered the waiting publish with an error and stored nothing of it
    assert len(outcome) == 1 and outcome[0] in (307, 503), outcome
    stored = read_all(url_b)
    assert [p for _i, p in stored] == [b"a0", b"a1", b"a2", b"a3", b"a4", b"b0"]
    ids = [i for i, _p in stored]
    assert ids == sorted(ids)
    # and a sends writes to the new owner from now on
    later = requests.post(
        f"{url_a}{TOPIC}/publish", json=publish_body(b"b1"), timeout=30, allow_redirects=False
    )
    assert later.status_code == 307 and later.headers["Location"].startswith(url_b)
    direct.close()


def test_subscription_records_are_kept_in_zookeeper_for_every_instance(
    cluster: TmsCluster,
) -> None:
    # Given two instances and a subscription made through a
    _a, url_a = cluster.serve("a")
    _b, url_b = cluster.serve("b")
    topic, sub = TopicId("ns", "orders"), SubscriptionId(TopicId("ns", "orders"), "s")
    with MessagingClient(url_a) as at_a, MessagingClient(url_b) as at_b:
        at_a.create_topic(topic)
        at_a.publish(topic, [b"1", b"2"])
        made = at_a.create_subscription(sub, Preferences(Start.earliest()))
        # When b commits a position with the version it read, and a with the older one
        end = after(MessageId.from_bytes(at_b.poll(topic).messages[-1][0]))
        moved = at_b.commit_subscription(sub, end, made.version)
        with pytest.raises(BadVersionError):
            at_a.commit_subscription(sub, EARLIEST, made.version)
        # Then both read the record b wrote, which ZooKeeper holds under the cluster's path
        assert at_a.get_subscription(sub).position == end == at_b.get_subscription(sub).position
    zk = connect(cluster.zk.connect_string, 10.0)
    try:
        _data, stat = zk.get(f"{cluster.base}/subscriptions/ns.orders/s")
        assert stat.version + 1 == moved.version
    finally:
        zk.stop()
        zk.close()
