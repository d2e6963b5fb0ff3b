"""Group commit of subscription records, in process: ``--consumers`` threads each read a
topic of 10,000 messages through their own subscription in polls of 100, each poll
committing the previous one's position riding on it (``Subscriptions.read`` with
``commit_version``), on a LevelDB store; prints messages/s and how many record changes
each synced write carried (``KvSubscriptionStore.syncs`` / ``changes``).

    python -m benchmarks.subs_group_commit [--consumers 16] [--rounds 2] [--commit-later]

``--commit-later``: each poll answers before its commit is durable (``commit_later``).

Figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.common import leveldb_service
from benchmarks.subs_bench import PAYLOAD
from tms.ids import MessageId
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.subscription import Preferences, SubscriptionId


def _consume(svc: MessagingService, sub: SubscriptionId, later: bool) -> int:
    start: MessageId | None = None
    version: int | None = None  # the first poll commits nothing
    total = 0
    while True:
        poll = svc.subscriptions.read(
            sub, start_from=start, limit=100, commit_version=version, commit_later=later
        )
        if not poll.messages:
            return total
        total += len(poll.messages)
        start, version = poll.position, poll.version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--commit-later", action="store_true", help="answer before the commit is durable"
    )
    args = parser.parse_args(argv)
    with leveldb_service() as (svc, records):
        topic = TopicId("bench", "group")
        svc.create_topic(topic)
        for _ in range(10):
            svc.publish(StoreRequest.of(topic, [PAYLOAD] * 1000))
        for r in range(args.rounds):
            subs = [SubscriptionId(topic, f"r{r}c{i}") for i in range(args.consumers)]
            for sub in subs:
                svc.subscriptions.create(sub, Preferences())
            syncs, changes = records.syncs, records.changes
            started = time.perf_counter()
            with ThreadPoolExecutor(args.consumers) as pool:
                read = sum(pool.map(lambda s: _consume(svc, s, args.commit_later), subs))
            elapsed = time.perf_counter() - started
            syncs, changes = records.syncs - syncs, records.changes - changes
            per_write = changes / max(syncs, 1)
            line = f"{read / elapsed:,.0f} msg/s, {changes} commits in {syncs} synced writes"
            print(f"round {r + 1}: {line} ({per_write:.2f} a write)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
