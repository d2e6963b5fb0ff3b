"""``tms serve`` killed with SIGKILL while a consumer's polls carry commits answered
before they are durable (``commit_later``), then restarted, many times, over REST and
the binary protocol: every commit an answer called durable is there after the crash,
the stored position is one the consumer committed, a consumer that resumes from the
record (as its ``bad_version`` tells it to) reads every message at least once, and
after the last restart the position reaches the end."""

from __future__ import annotations

import asyncio
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.procs import RPC_LISTENING, TmsServeProcess
from tms.aio import Subscriber as AioSubscriber
from tms.client import MessagingClient
from tms.client.subscriber import Subscriber
from tms.errors import BadVersionError, TmsError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import SubscriptionId

T = TopicId("ns", "later")
SUB = SubscriptionId(T, "reader")
MESSAGES = 20_000
_HTTP = re.compile(r"listening on (http://[\d.]+:\d+)")


@dataclass
class Consumer:
    """What the consumer was told: the positions it committed by version, and the
    highest version an answer called durable."""

    start: MessageId | None = None
    version: int | None = None
    committed: dict[int, MessageId] = field(default_factory=dict)
    durable: int = 0
    seen: set[bytes] = field(default_factory=set)
    lost: int = 0  # commits answered before their write, then gone after a kill
    answers: int = 0

    def resume(self, client: MessagingClient) -> None:
        """Go on from the stored record (the first poll commits nothing)."""
        info = client.get_subscription(SUB)
        self.start, self.version = info.position, None
        self.committed[info.version] = info.position

    def run(self, url: str, stop: threading.Event) -> None:
        client = MessagingClient(url)
        try:
            while not stop.is_set():
                try:
                    batch = client.poll_subscription(
                        SUB, start=self.start, limit=100, commit_version=self.version,
                        commit_later=True,
                    )  # fmt: skip
                except BadVersionError:  # a commit answered before it was durable was lost
                    self.lost += 1
                    self.resume(client)
                    continue
                if self.version is not None and self.start is not None:
                    self.committed[batch.version] = self.start
                durable = batch.version if batch.durable_version is None else batch.durable_version
                self.durable = max(self.durable, durable)
                self.answers += 1
                self.seen.update(m.id_bytes for m in batch.messages)
                if not batch.messages:
                    break
                self.start, self.version = batch.position, batch.version
        except TmsError:
            pass  # the server was killed
        finally:
            client.close()


def test_kill_9_while_commits_ride_on_polls_answered_before_their_writes(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tms.toml"
    config.write_text("[tms]\ncommit_later_ms = 50\n")  # a wide window, to lose commits
    serve = TmsServeProcess(tmp_path / "data", "--rpc-port", "0", "--config", str(config))
    rng = random.Random(18)
    consumer = Consumer()
    try:
        url = serve.start()
        with MessagingClient(url) as client:
            client.create_topic(T)
            for start in range(0, MESSAGES, 1000):
                client.publish(T, [f"m{i}".encode() for i in range(start, start + 1000)])
            client.create_subscription(SUB)
            consumer.resume(client)
        for round_ in range(6):
            target = url if round_ % 2 else serve.printed(RPC_LISTENING)
            answers = consumer.answers
            stop = threading.Event()
            thread = threading.Thread(target=consumer.run, args=(target, stop))
            thread.start()
            time.sleep(rng.uniform(0.05, 0.4))
            serve.stop(signal.SIGKILL)
            stop.set()
            thread.join(30)
            assert consumer.answers > answers, "the consumer made no progress"
            url = _start(serve)
            with MessagingClient(url) as client:
                info = client.get_subscription(SUB)
                # Then every commit an answer called durable survived the crash
                assert info.version >= consumer.durable, (info.version, consumer.durable)
                # and the stored position is the one the consumer committed with it
                assert consumer.committed.get(info.version) == info.position
                if consumer.version is not None and consumer.version != info.version:
                    consumer.lost += 1
                consumer.resume(client)
        # and a consumer that goes on from the record reads the rest
        stop = threading.Event()
        consumer.run(url, stop)
        with MessagingClient(url) as client:
            info = client.get_subscription(SUB)
            assert info.lag is not None and info.lag.messages == 0
            assert len(consumer.seen) == MESSAGES  # every message, at least once
        assert consumer.lost > 0, "no commit answered before its write was lost: widen the window"
        assert serve.stop(signal.SIGTERM) == 0
    finally:
        serve.kill_if_running()


def _start(serve: TmsServeProcess) -> str:
    """Start ``serve`` again, its output from this start only (its addresses are new)."""
    serve.output = []
    return serve.start()


def _fill(url: str, count: int, *, first: bool = True) -> None:
    with MessagingClient(url) as client:
        if first:
            client.create_topic(T)
            client.create_subscription(SUB)
        client.publish(T, [f"m{i}".encode() for i in range(count)])


def _stored_after_kill(serve: TmsServeProcess) -> tuple[MessageId, int]:
    """Kill the service with SIGKILL, start it again: the subscription's position and
    its lag."""
    serve.stop(signal.SIGKILL)
    with MessagingClient(_start(serve)) as client:
        info = client.get_subscription(SUB)
    assert info.lag is not None
    return info.position, info.lag.messages


def test_subscribers_with_commit_later_make_their_last_commit_durable_when_they_stop(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tms.toml"
    config.write_text("[tms]\ncommit_later_ms = 60000\n")  # written only when waited for
    serve = TmsServeProcess(tmp_path / "data", "--rpc-port", "0", "--config", str(config))
    try:
        url = serve.start()
        _fill(url, 300)
        # Given a subscriber whose commits ride on its polls, answered before durable,
        # that read everything and stopped once its last commit was answered
        with MessagingClient(url) as client:
            seen: list[bytes] = []
            holder: list[Subscriber] = []

            def caught_up() -> bool:  # the poll after the last message committed the end
                return len(seen) == 300 and holder[0].committed == holder[0].position

            subscriber = Subscriber(
                client, SUB, batch=50, wait_ms=0, commit_interval_s=0, commit_later=True,
                stop=caught_up,
            )  # fmt: skip
            holder.append(subscriber)
            seen.extend(message.payload for message in subscriber)
            # When it closes and the service is killed
            subscriber.close()
        position, lag = _stored_after_kill(serve)
        # Then what it processed is committed for good
        assert lag == 0, (position, lag)

        async def aio_half(rpc_url: str) -> int:
            read = 0
            async with AioSubscriber(
                rpc_url, SUB, batch=50, wait_ms=0, commit_interval_s=0, commit_later=True
            ) as s:
                while batch := await s.getmany():  # the last commits the end, riding
                    read += len(batch)
            return read

        # and so for the asyncio subscriber
        _fill(serve.printed(_HTTP), 200, first=False)
        assert asyncio.run(aio_half(serve.printed(RPC_LISTENING))) == 200
        position, lag = _stored_after_kill(serve)
        assert lag == 0, (position, lag)
        assert serve.stop(signal.SIGTERM) == 0
    finally:
        serve.kill_if_running()
