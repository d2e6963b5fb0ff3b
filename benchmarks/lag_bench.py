"""The cost of the subscription lag gauge (what a ``/metrics`` scrape computes): an
in-process service on LevelDB with ``--topics`` topics of ``--messages`` messages of 100
bytes, ``--subs`` subscriptions on each — half caught up (5 messages behind the end),
half at the start of the topic — and the time of ``Subscriptions.all_lags`` (every
subscription's lag, as a scrape asks for them).

    python -m benchmarks.lag_bench [--topics 20] [--messages 20000] [--subs 10] [--rounds 5]

Prints the median time of a scrape for each layout; figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from benchmarks.common import leveldb_service
from benchmarks.subs_bench import PAYLOAD
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.subscription import EARLIEST, Preferences, SubscriptionId


def _build(svc: MessagingService, topics: int, messages: int, subs: int) -> None:
    subscriptions = svc.subscriptions
    for t in range(topics):
        topic = TopicId("lag", f"t{t}")
        svc.create_topic(topic)
        for start in range(0, messages, 1000):
            svc.publish(StoreRequest.of(topic, [PAYLOAD] * min(1000, messages - start)))
        near = EARLIEST  # 5 messages before the end
        reader = SubscriptionId(topic, "reader")
        subscriptions.create(reader, Preferences())
        left = messages - 5
        while left:
            poll = subscriptions.read(reader, start_from=near, limit=min(left, 10_000))
            near, left = poll.position, left - len(poll.messages)
        subscriptions.delete(reader, subscriptions.get(reader, lag=False).version)
        for s in range(subs):
            sub = SubscriptionId(topic, f"{'near' if s % 2 else 'far'}{s}")
            created = subscriptions.create(sub, Preferences())
            if s % 2:
                subscriptions.commit(sub, near, created.version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--subs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with leveldb_service() as (svc, _):
        started = time.perf_counter()
        _build(svc, args.topics, args.messages, args.subs)
        print(f"built in {time.perf_counter() - started:.1f} s", flush=True)
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            found = svc.subscriptions.all_lags()
            times.append(time.perf_counter() - started)
        assert len(found) == args.topics * args.subs
        near = sorted({lag.messages for sub, lag in found if sub.name.startswith("near")})
        rounds = ", ".join(f"{1000 * t:.1f}" for t in times)
        median = 1000 * statistics.median(times)
        print(
            f"scrape of {len(found)} lags: median {median:.1f} ms (rounds: {rounds}); "
            f"caught-up lags {near}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
