"""A publishing process for the crash test: prints ``ack <request> <count>`` after each
publish returns. Usage: ``python -m tests.tms.publisher_proc STORE THREADS``, STORE a
LevelDB directory or a ``postgresql://`` URL."""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time

from tms.errors import StorageUnavailableError, TopicAlreadyExistsError
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.postgres import PostgresStore

T = TopicId("ns", "crash")


def open_store(where: str) -> KeyValueStore:
    """The store at ``where``; a PostgreSQL database that a killed process held is
    free once the server noticed (its lock goes with the session): waited for."""
    if not where.startswith("postgresql://"):
        return LevelDBStore(where)
    deadline = time.monotonic() + 30
    while True:
        try:
            return PostgresStore(where)
        except StorageUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> None:
    where, threads = sys.argv[1], int(sys.argv[2])
    svc = MessagingService(open_store(where))
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
