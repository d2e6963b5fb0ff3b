"""``tms serve`` as a process, killed with SIGKILL under publish load (over HTTP, and over
the binary protocol): every acknowledged message is there after a restart, no request
half-written; SIGTERM exits 0."""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.integration.procs import RPC_LISTENING, TmsServeProcess
from tms.client import MessagingClient
from tms.errors import TmsError, TopicAlreadyExistsError
from tms.model import TopicId

T = TopicId("ns", "load")


Serve = TmsServeProcess


def load(url: str, acked: dict[str, int], stop: threading.Event, worker: str) -> None:
    client = MessagingClient(url, retries=0)
    rng = random.Random(worker)
    i = 0
    try:
        while not stop.is_set():
            i += 1
            name = f"{worker}-{i}"
            count = rng.randint(1, 50)
            client.publish(T, [f"{name}/{j}/{count}" for j in range(count)])
            acked[name] = count
    except TmsError:
        pass  # the server died
    finally:
        client.close()


@pytest.mark.parametrize("rpc", [False, True], ids=["http", "binary"])
def test_kill_9_under_load_and_sigterm(tmp_path: Path, rpc: bool) -> None:
    if rpc:
        serve = Serve(tmp_path / "data", "--rpc-port", "0", listening=RPC_LISTENING)
    else:
        serve = Serve(tmp_path / "data")
    try:
        _rounds(serve)
    finally:
        serve.kill_if_running()


def _rounds(serve: Serve) -> None:
    acked: dict[str, int] = {}
    rng = random.Random(3)
    for round_ in range(3):
        url = serve.start()
        client = MessagingClient(url)
        with contextlib.suppress(TopicAlreadyExistsError):
            client.create_topic(T)
        found: dict[str, list[int]] = {}
        for message in client.poll(T).messages:
            name, index, count = message.payload.decode().split("/")
            found.setdefault(name, []).append(int(index))
            assert int(count) > 0
        client.close()
        assert not [a for a in acked if a not in found], "acknowledged messages lost"
        for name, indexes in found.items():
            assert indexes == sorted(indexes) and len(indexes) == len(set(indexes))
            assert indexes == list(range(len(indexes))) and (
                name not in acked or len(indexes) == acked[name]
            )
        stop = threading.Event()
        workers = [
            threading.Thread(target=load, args=(url, acked, stop, f"r{round_}w{n}"))
            for n in range(4)
        ]
        for w in workers:
            w.start()
        time.sleep(rng.uniform(0.5, 1.0))
        serve.stop(signal.SIGKILL)
        stop.set()
        for w in workers:
            w.join(10)
    assert acked, "the load made no progress"
    serve.start()
    assert serve.stop(signal.SIGTERM) == 0
