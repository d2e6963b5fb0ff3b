"""Server CPU per subscription poll over the binary protocol, and where it goes: ``tms
serve`` (LevelDB in a temporary directory) in a child process, one client in this
one reading a topic of ``--messages`` messages of 100 bytes in polls of 100, each
round every way of ``--kinds`` in turn (A B A B ...): ``plain`` (a topic poll from a
position the client keeps), ``sub`` (a subscription poll from such a position, no
commit), ``commit`` (a subscription poll with the previous batch's commit riding on
it, answered once durable), ``later`` (the same with ``commit_later``). Prints
messages/s, and the server's CPU time (user + system, from ``/proc``) and the wall time
per poll. ``--profile FILE`` runs the server with one cProfile per thread
(``benchmarks.queue_cpu``'s) and writes their merged statistics to FILE: cProfile
counts wall time, so read shares, not microseconds.

    python -m benchmarks.subs_cpu [--kinds plain,sub,commit,later] [--rounds 2]
                                  [--messages 50000] [--profile FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from benchmarks.queue_cpu import _cpu_s, served
from benchmarks.subs_bench import PAYLOAD, _fill, _plain, _riding
from tms.client import MessagingClient
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import SubscriptionId


def _sub_only(client: MessagingClient, sub: SubscriptionId) -> int:
    start: MessageId | None = None
    total = 0
    while (read := client.poll_subscription(sub, start=start, limit=100)).messages:
        total += len(read.messages)
        start = read.position
    return total


def _read(client: MessagingClient, topic: TopicId, sub: SubscriptionId, kind: str) -> int:
    if kind == "plain":
        return _plain(client, topic, 100)
    if kind == "sub":
        return _sub_only(client, sub)
    return _riding(client, sub, 100, commit_later=kind == "later")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="plain,sub,commit,later")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--profile", metavar="FILE")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as data,
        served(data, args.profile) as (proc, rpc),
        MessagingClient(rpc) as client,
    ):
        topic = TopicId("bench", "subcpu")
        _fill(client, topic, args.messages, [PAYLOAD] * 1000)
        for r in range(args.rounds):
            for kind in args.kinds.split(","):
                sub = SubscriptionId(topic, f"{kind}{r}")
                client.create_subscription(sub)
                cpu, wall = _cpu_s(proc.pid), time.perf_counter()
                read = _read(client, topic, sub, kind)
                cpu, wall = _cpu_s(proc.pid) - cpu, time.perf_counter() - wall
                polls = read / 100
                print(
                    f"round {r + 1} {kind}: {read / wall:,.0f} msg/s, server CPU "
                    f"{1e6 * cpu / polls:.0f} µs a poll, wall {1e6 * wall / polls:.0f} µs",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
