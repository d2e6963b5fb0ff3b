"""Chaos: 3 ZooKeeper nodes, PostgreSQL, 2 elected ``txn serve`` and 3 ``tms serve``
cluster instances on loopback. Plain, transactional and staged publishers and two
transactional consumers (through different instances) run for ``RUN_S`` seconds while a
random ``tms`` or ``txn`` instance — owners and the leader included — is killed with -9
every few seconds and restarted, and one ZooKeeper node is killed and restarted.

Afterwards: every acknowledged message is stored exactly once (and nothing else but
messages whose publish failed), every committed transaction's messages are visible to a
transactional reader exactly once, no aborted or invalidated one is visible, no
transaction is visible in part, and both consumers saw one and the same order (the
order of a final transactional read). Subscribers meanwhile: at-least-once ones of the
plain and the transactional topic (restarted from their committed position after any
error) skip no acknowledged or committed message and see no aborted one; an
exactly-once consumer (read a batch, publish its outputs, commit the position, in one
transaction) publishes each committed input's output exactly once, in the input's
order; no subscription's committed position ever moves backwards. Failover times (from
a kill to the next write acknowledged) are printed, not asserted. ``TXMS_CHAOS_SEED``
replays a run's choices."""

from __future__ import annotations

import itertools
import os
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.integration.chaos import (
    Instance,
    Record,
    Topology,
    consumer,
    exactly_once,
    plain_publisher,
    position_watch,
    running,
    subscriber,
    tx_publisher,
)
from tms.client import MessagingClient
from tms.model import TopicId
from tms.subscription import Preferences, Start, SubscriptionId
from txms_testing import ZooKeeperEnsemble
from txn.rpc.client import ThriftTxClient

RUN_S = 60.0
KILL_EVERY_S = (2.0, 4.0)
DOWN_S = 1.0
PLAIN, TX, STAGED = TopicId("chaos", "plain"), TopicId("chaos", "tx"), TopicId("chaos", "staged")
OUT = TopicId("chaos", "out")
ALO_PLAIN, ALO_TX = SubscriptionId(PLAIN, "alo"), SubscriptionId(TX, "alo")
EO = SubscriptionId(TX, "eo")
_bases = itertools.count(1)


@pytest.fixture
def topology(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[Topology]:
    with running(zk_ensemble, pg_url, f"/chaos{next(_bases)}") as top:
        yield top


def read_transactionally(
    client: MessagingClient, tx: ThriftTxClient, topic: TopicId
) -> list[bytes]:
    """Everything visible to a new transaction, from the start."""
    snapshot = tx.start_short()
    try:
        seen: list[bytes] = []
        position: bytes | None = None
        while True:
            result = client.poll(
                topic, start=position, inclusive=position is None, limit=5000, transaction=snapshot
            )
            seen.extend(m[1] for m in result.messages)
            if not result.messages:
                return seen
            position = result.messages[-1][0]
    finally:
        tx.abort(snapshot)


def read_everything(client: MessagingClient, topic: TopicId) -> list[bytes]:
    seen: list[bytes] = []
    position: bytes | None = None
    while True:
        result = client.poll(topic, start=position, inclusive=position is None, limit=5000)
        seen.extend(m[1] for m in result.messages)
        if not result.messages:
            return seen
        position = result.messages[-1][0]


def check_transactions(visible: list[bytes], record: Record) -> None:
    counts = Counter(visible)
    assert all(n == 1 for n in counts.values()), "a message visible twice"
    for messages in record.committed:
        assert all(counts[m] == 1 for m in messages), f"committed {messages} not visible"
    for messages in record.invalidated:
        assert not any(m in counts for m in messages), f"aborted {messages} visible"
    for messages in record.unknown:
        assert len({counts[m] for m in messages}) == 1, f"{messages} visible in part"
    # a transaction's messages are contiguous: published in one request
    for first, second in itertools.pairwise(visible):
        if first.endswith(b"-0"):
            assert second == first[:-1] + b"1", f"{first!r} not followed by its pair"


def test_chaos(topology: Topology) -> None:
    seed = int(os.environ.get("TXMS_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"\nchaos seed {seed} (TXMS_CHAOS_SEED={seed} replays the choices)")
    rng = random.Random(seed)
    # Given the topics, the publishers and the consumers running
    admin = topology.client()
    for topic in (PLAIN, TX, STAGED, OUT):
        admin.create_topic(topic)
    admin.create_subscription(ALO_PLAIN, Preferences(Start.earliest()))
    for sub in (ALO_TX, EO):
        admin.create_subscription(sub, Preferences(Start.earliest(), transactional=True))
    stop, stop_consumers = threading.Event(), threading.Event()
    plain, tx, staged = Record(), Record(), Record()
    seen: dict[str, list[bytes]] = {"tx-1": [], "tx-2": [], "staged-1": [], "staged-2": []}
    tx_clients = [topology.tx_client() for _ in range(8)]
    clients = [topology.client(rotate=i % 3) for i in range(8)]
    subscribed: dict[str, list[bytes]] = {"plain": [], "tx": []}
    backwards: list[str] = []
    workers = [
        threading.Thread(target=plain_publisher, args=(clients[0], PLAIN, stop, plain)),
        threading.Thread(
            target=tx_publisher,
            args=(clients[1], tx_clients[0], TX, stop, tx),
            kwargs={"staged": False},
        ),
        threading.Thread(
            target=tx_publisher,
            args=(clients[2], tx_clients[1], STAGED, stop, staged),
            kwargs={"staged": True},
        ),
    ]
    consumers = [
        threading.Thread(
            target=consumer, args=(clients[3], tx_clients[2], TX, stop_consumers, seen["tx-1"])
        ),
        threading.Thread(
            target=consumer, args=(clients[4], tx_clients[3], TX, stop_consumers, seen["tx-2"])
        ),
        threading.Thread(
            target=consumer,
            args=(clients[3], tx_clients[4], STAGED, stop_consumers, seen["staged-1"]),
        ),
        threading.Thread(
            target=consumer,
            args=(clients[5], tx_clients[5], STAGED, stop_consumers, seen["staged-2"]),
        ),
        threading.Thread(
            target=subscriber,
            args=(clients[6], None, ALO_PLAIN, stop_consumers, subscribed["plain"]),
        ),
        threading.Thread(
            target=subscriber,
            args=(clients[7], tx_clients[6], ALO_TX, stop_consumers, subscribed["tx"]),
        ),
        threading.Thread(
            target=exactly_once, args=(clients[6], tx_clients[7], EO, OUT, stop_consumers)
        ),
        threading.Thread(
            target=position_watch,
            args=(clients[7], [ALO_PLAIN, ALO_TX, EO], stop_consumers, backwards),
        ),
    ]
    for thread in workers + consumers:
        thread.start()
    # When instances are killed -9 and restarted, and a ZooKeeper node too, for RUN_S
    kills: list[tuple[str, float]] = []
    zk_victim = rng.choice(topology.zk.nodes)
    zk_down_at, zk_up_at = RUN_S * 0.3, RUN_S * 0.5
    started = time.monotonic()
    try:
        while (now := time.monotonic() - started) < RUN_S:
            if zk_down_at <= now and zk_victim.running and now < zk_up_at:
                print(f"{now:5.1f}s kill zookeeper node {zk_victim.id}")
                zk_victim.kill()
            elif now >= zk_up_at and not zk_victim.running:
                print(f"{now:5.1f}s restart zookeeper node {zk_victim.id}")
                topology.zk.restart(zk_victim)
            victim: Instance = rng.choice(topology.txns + topology.tmss)
            print(f"{now:5.1f}s kill -9 {victim.name}")
            victim.kill()
            kills.append((victim.name, time.monotonic()))
            time.sleep(DOWN_S)
            victim.start()
            time.sleep(rng.uniform(*KILL_EVERY_S))
        if not zk_victim.running:
            topology.zk.restart(zk_victim)
    finally:
        stop.set()
        for thread in workers:
            thread.join(120)
    for instance in topology.tmss:
        topology.wait_serving(instance)
    # Then: plain messages, each acknowledged one exactly once
    stored = read_everything(admin, PLAIN)
    counts = Counter(stored)
    assert all(n == 1 for n in counts.values()), "a plain message stored twice"
    assert set(plain.acked) <= set(counts), "an acknowledged message is missing"
    assert set(counts) <= set(plain.acked) | set(plain.failed)
    # transactions: committed ones whole and once, aborted ones never, none in part
    reader_tx = topology.tx_client()
    final = {
        "tx": read_transactionally(admin, reader_tx, TX),
        "staged": read_transactionally(admin, reader_tx, STAGED),
    }
    check_transactions(final["tx"], tx)
    check_transactions(final["staged"], staged)
    # every consumer saw the same order: the final read's (once they caught up)
    expected_out = [b"out-" + m for m in final["tx"]]

    def behind() -> bool:
        return (
            any(len(seen[name]) < len(final[name.split("-")[0]]) for name in seen)
            or not set(plain.acked) <= set(subscribed["plain"])
            or not set(final["tx"]) <= set(subscribed["tx"])
            or len(read_transactionally(admin, reader_tx, OUT)) < len(expected_out)
        )

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and behind():
        time.sleep(0.5)
    stop_consumers.set()
    for thread in consumers:
        thread.join(60)
    for name, order in seen.items():
        expected = final[name.split("-")[0]]
        assert order[: len(expected)] == expected, f"consumer {name} saw another order"
    # subscribers: at least once, nothing skipped, nothing aborted; exactly once: once
    assert set(plain.acked) <= set(subscribed["plain"]), "a subscriber skipped a message"
    assert set(subscribed["plain"]) <= set(stored)
    assert set(final["tx"]) == set(subscribed["tx"]), "a subscriber skipped or saw too much"
    outputs = read_transactionally(admin, reader_tx, OUT)
    assert all(n == 1 for n in Counter(outputs).values()), "an exactly-once output twice"
    assert outputs == expected_out, "exactly-once outputs missing or out of order"
    assert backwards == [], f"positions moved backwards: {backwards}"
    # and, printed: what happened and how long writes stopped after each kill
    _report(kills, plain, tx, staged, final)
    print("consumers saw: " + ", ".join(f"{n} {len(order)}" for n, order in seen.items()))
    print(
        f"subscribers saw: plain {len(subscribed['plain'])} for {len(set(plain.acked))} "
        f"acknowledged, tx {len(subscribed['tx'])} for {len(final['tx'])} committed; "
        f"exactly-once outputs {len(outputs)}"
    )
    for c in [*clients, admin]:
        c.close()
    for t in [*tx_clients, reader_tx]:
        t.close()


def _report(
    kills: list[tuple[str, float]],
    plain: Record,
    tx: Record,
    staged: Record,
    final: dict[str, list[bytes]],
) -> None:
    print(
        f"plain: {len(plain.acked)} acknowledged, {len(plain.failed)} failed; "
        f"tx: {len(tx.committed)} committed, {len(tx.invalidated)} aborted, "
        f"{len(tx.unknown)} unknown, {len(final['tx'])} messages visible; "
        f"staged: {len(staged.committed)} committed, {len(staged.invalidated)} aborted, "
        f"{len(staged.unknown)} unknown"
    )
    successes = sorted(plain.successes + tx.successes + staged.successes)
    gaps: dict[str, list[float]] = {}
    for name, at in kills:
        later = [s for s in successes if s > at]
        record = plain if name.startswith("tms") else tx
        own = [s for s in record.successes if s > at]
        if later and own:
            gaps.setdefault(name.split("-")[0], []).append(own[0] - at)
    for kind, values in gaps.items():
        print(
            f"{kind} kills: {len(values)}; next write acknowledged after "
            f"median {statistics.median(values):.2f} s, max {max(values):.2f} s"
        )
