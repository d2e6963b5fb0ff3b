"""A publishing process for the crash test: prints ``ack <request> <count>`` after each
publish returns. Usage: ``python -m tests.tms.publisher_proc DIR THREADS``."""

from __future__ import annotations

import contextlib
import random
import sys
import threading

from tms.errors import TopicAlreadyExistsError
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore

T = TopicId("ns", "crash")


def main() -> None:
    directory, threads = sys.argv[1], int(sys.argv[2])
    svc = MessagingService(LevelDBStore(directory))
    with contextlib.suppress(TopicAlreadyExistsError):  # it exists from an earlier run
        svc.create_topic(T)
    print("ready", flush=True)
    lock = threading.Lock()

    def run(n: int) -> None:
        rng = random.Random()
        i = 0
        while True:
            i += 1
            name = f"{n}-{i}-{rng.randrange(10**9)}"
            count = rng.randint(1, 200)
            svc.publish(StoreRequest.of(T, [f"{name}/{j}/{count}" for j in range(count)]))
            with lock:
                print(f"ack {name} {count}", flush=True)

    workers = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
