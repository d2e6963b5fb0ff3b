"""The chaos test's parts: the topology (2 elected ``txn serve`` and 3 ``tms serve``
cluster instances on one ZooKeeper ensemble and PostgreSQL) and the workers that run
against it while instances are killed, each recording what it was told: publishers,
transactional followers, subscribers (at least once), an exactly-once subscription
consumer, and a watch on the subscriptions' positions."""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.consumer import SubscriptionConsumer
from tms.client.subscriber import Subscriber
from tms.errors import TmsError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import SubscriptionId
from txms_common.retry import RetryWithBackoff
from txms_testing import ServiceProcess, ZooKeeperEnsemble, free_port, txn_command
from txn import TransactionExecutor
from txn.errors import TxError
from txn.rpc.client import ThriftTxClient

SESSION_S = 2.0


@dataclass
class Instance:
    name: str
    argv: list[str]
    proc: ServiceProcess | None = None
    url: str = ""

    def start(self) -> None:
        self.proc = ServiceProcess(self.argv, self.name).start()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()


@dataclass
class Topology:
    zk: ZooKeeperEnsemble
    store_url: str
    base: str
    txns: list[Instance] = field(default_factory=list)
    tmss: list[Instance] = field(default_factory=list)

    @property
    def tx_url(self) -> str:
        return f"zk://{self.zk.connect_string}{self.base}/txn"

    @property
    def urls(self) -> list[str]:
        return [i.url for i in self.tmss]

    def start(self) -> None:
        for name in ("txn-a", "txn-b"):
            argv = txn_command(
                "serve", "--zookeeper", self.zk.connect_string, "--zk-path", f"{self.base}/txn",
                "--state", self.store_url, "--port", "0", "--name", name,
                "--session-timeout-s", str(SESSION_S), log_level="INFO",
            )  # fmt: skip
            self.txns.append(Instance(name, argv))
        for name in ("tms-a", "tms-b", "tms-c"):
            port = free_port()  # kept across restarts: clients hold the list of URLs
            argv = [
                sys.executable, "-m", "tms.cli", "--log-level", "INFO", "serve",
                "--port", str(port), "--store", self.store_url,
                "--zookeeper", self.zk.connect_string, "--zk-path", f"{self.base}/tms",
                "--name", name, "--session-timeout-s", str(SESSION_S),
                "--tx-server", self.tx_url,
            ]  # fmt: skip
            self.tmss.append(Instance(name, argv, url=f"http://127.0.0.1:{port}"))
        for instance in self.txns + self.tmss:
            instance.start()
        for instance in self.tmss:
            self.wait_serving(instance)
        self.txns[0].proc.wait_for(r"leading|standing by", 60)  # type: ignore[union-attr]

    def wait_serving(self, instance: Instance, timeout_s: float = 60.0) -> None:
        assert instance.proc is not None
        instance.proc.wait_for("listening on", timeout_s)

    def stop(self) -> None:
        for instance in self.txns + self.tmss:
            with contextlib.suppress(Exception):
                instance.kill()

    def tx_client(self) -> ThriftTxClient:
        retry = RetryWithBackoff(initial_s=0.05, factor=2.0, limit_s=4.0)
        return ThriftTxClient(self.tx_url, retry=retry, timeout_s=10)

    def client(self, rotate: int = 0) -> MessagingClient:
        urls = self.urls[rotate:] + self.urls[:rotate]
        return MessagingClient(urls, timeout_s=10, retries=6, backoff_s=0.05)


@contextlib.contextmanager
def running(zk: ZooKeeperEnsemble, store_url: str, base: str) -> Iterator[Topology]:
    """The topology started under ``base``; afterwards its services killed and the shared
    ensemble left whole (a node a test killed is restarted)."""
    top = Topology(zk, store_url, base)
    try:
        top.start()
        yield top
    finally:
        top.stop()
        for node in zk.nodes:
            if not node.running:
                zk.restart(node)
        zk.wait_for_quorum(60)


@dataclass
class Record:
    """What one worker was told."""

    acked: list[bytes] = field(default_factory=list)
    """Plain: messages acknowledged."""
    failed: list[bytes] = field(default_factory=list)
    """Plain: messages whose publish failed (stored or not)."""
    committed: list[tuple[bytes, ...]] = field(default_factory=list)
    """Transactional: the messages of each committed transaction."""
    invalidated: list[tuple[bytes, ...]] = field(default_factory=list)
    """Transactional: the messages of each transaction that was invalidated or aborted
    (never to be visible)."""
    unknown: list[tuple[bytes, ...]] = field(default_factory=list)
    """Transactional: the outcome could not be learnt (visible whole, or not at all)."""
    errors: int = 0
    successes: list[float] = field(default_factory=list)
    """When each write succeeded (``time.monotonic``), for failover times."""


def plain_publisher(
    client: MessagingClient, topic: TopicId, stop: threading.Event, record: Record
) -> None:
    for n in itertools.count():
        if stop.is_set():
            return
        payload = b"plain-%06d" % n
        try:
            client.publish(topic, [payload])
        except TmsError:
            record.failed.append(payload)
            record.errors += 1
            time.sleep(0.05)
        else:
            record.acked.append(payload)
            record.successes.append(time.monotonic())


def tx_publisher(
    client: MessagingClient,
    tx_client: ThriftTxClient,
    topic: TopicId,
    stop: threading.Event,
    record: Record,
    *,
    staged: bool,
) -> None:
    """Transactions of two messages each: published at commit (or staged as they go and
    marked at commit), then committed; a failure before the commit aborts them (or
    invalidates them when a rollback cannot be proven); a commit without an answer is
    settled by invalidating (False: it had committed)."""
    kind = b"staged" if staged else b"tx"
    for n in itertools.count():
        if stop.is_set():
            return
        messages = (kind + b"-%06d-0" % n, kind + b"-%06d-1" % n)
        publisher = TransactionalPublisher(client, staged=staged)
        try:
            tx = tx_client.start_short()
        except TxError:
            record.errors += 1
            time.sleep(0.1)
            continue
        try:
            publisher.start_tx(tx)
            publisher.publish(topic, list(messages))
            if not publisher.commit_tx():
                raise TmsError("the publisher could not publish at commit")
        except (TmsError, TxError):
            record.errors += 1
            rolled_back = False
            with contextlib.suppress(Exception):
                rolled_back = publisher.rollback_tx()
            _settle(tx_client, tx.transaction_id, abort=tx if rolled_back else None)
            record.invalidated.append(messages)
            continue
        try:
            tx_client.commit_or_throw(tx)
        except TxError:
            record.errors += 1
            if _settle(tx_client, tx.transaction_id):
                record.invalidated.append(messages)
            else:
                record.unknown.append(messages)  # committed, or invalid before we asked
            continue
        record.committed.append(messages)
        record.successes.append(time.monotonic())


def _settle(tx_client: ThriftTxClient, tx_id: int, abort: object = None) -> bool:
    """Abort (``abort``: the transaction) or invalidate ``tx_id`` until the transaction
    service answers; whether it was invalidated (or aborted)."""
    for _ in range(200):
        try:
            if abort is not None:
                tx_client.abort(abort)  # type: ignore[arg-type]
                return True
            return tx_client.invalidate(tx_id)
        except TxError:
            time.sleep(0.1)
    raise AssertionError(f"the transaction service never answered for {tx_id}")


def consumer(
    client: MessagingClient,
    tx_client: ThriftTxClient,
    topic: TopicId,
    stop: threading.Event,
    seen: list[bytes],
) -> None:
    """Follow ``topic`` transactionally, resuming after the last message on any error."""
    position: bytes | None = None
    while not stop.is_set():
        try:
            for message_id, payload in client.follow(
                topic,
                start=position,
                inclusive=position is None,
                tx_client=tx_client,
                wait_ms=1000,
                stop=stop.is_set,
            ):
                seen.append(payload)
                position = message_id
        except (TmsError, TxError):
            time.sleep(0.1)


def subscriber(
    client: MessagingClient,
    tx_client: ThriftTxClient | None,
    sub: SubscriptionId,
    stop: threading.Event,
    seen: list[bytes],
) -> None:
    """At least once: a ``Subscriber`` of ``sub`` (transactional with ``tx_client``),
    started again from the committed position after any error (what a restarted
    process does): its messages may come again, never be skipped."""
    while not stop.is_set():
        try:
            with Subscriber(
                client, sub, tx_client=tx_client, wait_ms=500, commit_interval_s=0.2,
                tx_refresh_s=0.5, stop=stop.is_set,
            ) as reader:  # fmt: skip
                for message in reader:
                    seen.append(message.payload)
        except (TmsError, TxError):
            time.sleep(0.1)


def exactly_once(
    client: MessagingClient,
    tx_client: ThriftTxClient,
    sub: SubscriptionId,
    out: TopicId,
    stop: threading.Event,
) -> None:
    """Exactly once: each transaction reads a batch of ``sub`` (``SubscriptionConsumer``)
    and publishes ``out-<payload>`` for each message to ``out`` (``TransactionalPublisher``),
    its new position and outputs committing together or not at all."""
    consumer = SubscriptionConsumer(client, sub)
    publisher = TransactionalPublisher(client)
    executor = TransactionExecutor(tx_client, [consumer, publisher])

    def step() -> int:
        messages = consumer.poll(20)
        if messages:
            publisher.publish(out, [b"out-" + m.payload for m in messages])
        return len(messages)

    while not stop.is_set():
        try:
            if not executor.execute(step):
                time.sleep(0.05)
        except (TmsError, TxError):
            time.sleep(0.1)


def position_watch(
    client: MessagingClient,
    subs: list[SubscriptionId],
    stop: threading.Event,
    backwards: list[str],
) -> None:
    """Reads each subscription's committed position over and over; records any that
    moved backwards (nothing seeks in the chaos test)."""
    last: dict[SubscriptionId, MessageId] = {}
    while not stop.is_set():
        for sub in subs:
            try:
                position = client.get_subscription(sub).position
            except TmsError:
                continue
            if sub in last and position < last[sub]:
                backwards.append(f"{sub}: {last[sub].hex} -> {position.hex}")
            last[sub] = max(position, last.get(sub, position))
        time.sleep(0.1)
