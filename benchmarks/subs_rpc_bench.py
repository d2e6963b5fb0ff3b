"""Subscription poll + commit over the binary protocol against REST: the standalone stack
in its own process, the client in this one, reading a topic of 100,000 messages of 100
bytes in polls of 100, alternately over ``http://`` and ``tms://`` (A B A B ...), each
time four ways (``benchmarks.subs_bench``): a plain topic poll from a position the
client keeps; a subscription poll that commits the previous batch's position riding on
it (what ``Subscriber`` sends with ``commit_interval_s=0``); the same answered before
that commit is durable (``commit_later``); a subscription poll then a separate commit.
Also the exactly-once loop (poll 100, publish 100, position written in the
transaction; no application state) over each.

    python -m benchmarks.subs_rpc_bench [--quick] [--rounds 3] [--loop] [--consumers 16]

With ``--consumers N``, instead of the single client: N consumers at once, each reading
the whole topic (of 10,000 messages) with its own client, alternately as plain polls
and as subscription polls with their commits riding on them (``bench_many``).

Results: ``benchmarks/results/subs_rpc.json``; figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import new_report, write_report
from benchmarks.subs_bench import PAYLOAD, RESULTS, _fill, _plain, _riding, _separate, bench_loop
from tms.client import MessagingClient
from tms.model import TopicId
from tms.standalone import Launched
from tms.subscription import SubscriptionId


def bench_transports(urls: dict[str, str], count: int, rounds: int, batch: int = 100) -> Any:
    clients = {name: MessagingClient(url) for name, url in urls.items()}
    topic = TopicId("bench", "subrpc")
    _fill(clients["http"], topic, count, [PAYLOAD] * 1000)
    subs = {name: SubscriptionId(topic, f"reader-{name}") for name in urls}
    for name, client in clients.items():
        client.create_subscription(subs[name])
    rates: dict[str, list[float]] = {}
    for r in range(rounds):
        for name, client in clients.items():
            kinds: dict[str, Callable[[], int]] = {
                "plain": partial(_plain, client, topic, batch),
                "poll_commit": partial(_riding, client, subs[name], batch),
                "poll_commit_later": partial(_riding, client, subs[name], batch, True),
                "poll_then_commit": partial(_separate, client, subs[name], batch),
            }
            for kind, run in kinds.items():
                started = time.perf_counter()
                read = run()
                assert read == count, (name, kind, read)
                rates.setdefault(f"{name}_{kind}", []).append(
                    count / (time.perf_counter() - started)
                )
        print(
            f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()),
            flush=True,
        )
    for client in clients.values():
        client.close()
    medians = {k: round(statistics.median(v)) for k, v in rates.items()}
    return {
        "batch": batch,
        "messages": count,
        "rounds": {k: [round(x) for x in v] for k, v in rates.items()},
        "medians": medians,
        "poll_commit_tms_over_http": round(
            medians["tms_poll_commit"] / medians["http_poll_commit"], 2
        ),
        **_ratios(medians, urls),
    }


def _concurrently(clients: list[MessagingClient], run: Callable[[int], int]) -> tuple[int, float]:
    """``run(i)`` for each client at once, one thread each: messages read in all and the
    wall time from the first start to the last end."""
    gate = threading.Barrier(len(clients) + 1)
    counts = [0] * len(clients)

    def consumer(i: int) -> None:
        gate.wait()
        counts[i] = run(i)

    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    gate.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return sum(counts), time.perf_counter() - started


def bench_many(
    urls: dict[str, str], consumers: int, count: int, rounds: int, batch: int = 100
) -> Any:
    """``consumers`` readers at once, each of the whole topic of ``count`` messages, each
    with its own client (a connection each), alternately (A B A B ...) as plain polls
    and as subscription polls with the previous batch's commit riding on them (a
    subscription each: their commits can share a sync, the group commit of records),
    answered once it is durable and before (``commit_later``)."""
    topic = TopicId("bench", f"many-{time.monotonic_ns()}")
    with MessagingClient(urls["http"]) as setup:
        _fill(setup, topic, count, [PAYLOAD] * 1000)
        subs = [SubscriptionId(topic, f"c{i}") for i in range(consumers)]
        for sub in subs:
            setup.create_subscription(sub)
    rates: dict[str, list[float]] = {}
    for r in range(rounds):
        for name, url in urls.items():
            clients = [MessagingClient(url) for _ in range(consumers)]

            def plain(i: int, cs: list[MessagingClient] = clients) -> int:
                return _plain(cs[i], topic, batch)

            def poll_commit(i: int, cs: list[MessagingClient] = clients) -> int:
                return _riding(cs[i], subs[i], batch)

            def poll_commit_later(i: int, cs: list[MessagingClient] = clients) -> int:
                return _riding(cs[i], subs[i], batch, commit_later=True)

            kinds: dict[str, Callable[[int], int]] = {
                "plain": plain,
                "poll_commit": poll_commit,
                "poll_commit_later": poll_commit_later,
            }
            for kind, run in kinds.items():
                read, elapsed = _concurrently(clients, run)
                assert read == count * consumers, (name, kind, read)
                rates.setdefault(f"{name}_{kind}", []).append(read / elapsed)
            for client in clients:
                client.close()
        print(
            f"{consumers} consumers, round {r + 1}: "
            + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()),
            flush=True,
        )
    medians = {k: round(statistics.median(v)) for k, v in rates.items()}
    return {
        "consumers": consumers,
        "batch": batch,
        "messages_each": count,
        "rounds": {k: [round(x) for x in v] for k, v in rates.items()},
        "medians": medians,
        **_ratios(medians, urls),
    }


def _ratios(medians: dict[str, int], urls: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each way of committing against the plain poll, by transport (medians)."""
    return {
        f"{kind}_over_plain": {
            name: round(medians[f"{name}_{kind}"] / medians[f"{name}_plain"], 2) for name in urls
        }
        for kind in ("poll_commit", "poll_commit_later")
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", action="store_true", help="the exactly-once loop too")
    parser.add_argument(
        "--consumers", type=int, default=0, help="N consumers at once (bench_many) instead"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "subs_rpc.json")
    args = parser.parse_args(argv)
    report: dict[str, Any] = new_report("subscriptions-rpc", message_bytes=len(PAYLOAD))
    with (
        tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp,
        Launched(Path(tmp) / "d") as stack,
    ):
        urls = {"http": stack.url, "tms": stack.rpc_url}
        count = 20_000 if args.quick else 100_000
        if args.consumers:
            report["many"] = bench_many(urls, args.consumers, count // 10, args.rounds)
            print(f"many: {report['many']}", flush=True)
        else:
            report["poll"] = bench_transports(urls, count, args.rounds)
            print(f"poll: {report['poll']}", flush=True)
        if args.loop:
            report["loop"] = []
            for _ in range(args.rounds):
                for name, url in urls.items():
                    result = bench_loop(url, stack.tx_address, Path(tmp), 20_000, state=False)
                    report["loop"].append({"transport": name, **result})
                    print(f"exactly-once loop: {report['loop'][-1]}", flush=True)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
