"""Client CPU to build a publish's body, by payload count: built from its bytes
(``tms.rpc.frames.plain_publish_body``) against thriftpy2's encoding of the
``PublishRequest`` struct (the same bytes), and what ``tms.client.rpccore.publish_body``,
which picks between them, costs.

    python -m benchmarks.publish_body [--rounds N] [--size BYTES]

Prints µs per body, best of seven repeats, for 1 to 100 payloads; ``--rounds`` runs it
again (a shared machine: trust what repeats).
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from functools import partial

from tms.client.rpccore import publish_body
from tms.model import TopicId
from tms.rpc.frames import encode_body, plain_names, plain_publish_body
from tms.rpc.values import publish_request

COUNTS = (1, 2, 4, 8, 16, 32, 100)


def best_us(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=7)) / number * 1e6


def encoded(topic: TopicId, data: list[bytes]) -> bytes:
    return encode_body(publish_request(topic, data, None, None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    topic = TopicId("ns", "t")
    names = plain_names(topic.namespace, topic.topic)
    print(
        f"{'round':>5} {'payloads':>8} {'from bytes':>11} {'struct':>8} {'publish_body':>13}  (µs)"
    )
    for round_ in range(1, args.rounds + 1):
        for n in COUNTS:
            data = [bytes(args.size)] * n
            number = max(200, 40_000 // n)
            plain = best_us(partial(plain_publish_body, names, data), number)
            struct = best_us(partial(encoded, topic, data), number)
            chosen = best_us(partial(publish_body, topic, data, None, None), number)
            print(f"{round_:>5} {n:>8} {plain:>11.2f} {struct:>8.2f} {chosen:>13.2f}")


if __name__ == "__main__":
    main()
