"""kill -9 a publishing process at random moments: on reopen every acknowledged message
is there, and no request is half-written."""

from __future__ import annotations

import collections
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.tms.publisher_proc import open_store
from tms.model import TopicId
from tms.service import MessagingService

T = TopicId("ns", "crash")
ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(where: str, seconds: float) -> dict[str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tms.publisher_proc", where, "4"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    acked: dict[str, int] = {}
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("ready"):
                ready.set()
            elif line.startswith("ack "):
                _, name, count = line.split()
                acked[name] = int(count)

    reader = threading.Thread(target=read)
    reader.start()
    assert ready.wait(30), "the publisher did not start"
    time.sleep(seconds)
    proc.kill()
    proc.wait(10)
    reader.join(10)
    assert proc.stdout is not None
    proc.stdout.close()
    return acked


@pytest.mark.parametrize("engine", ["leveldb", "postgres"])
def test_kill_9_loses_no_acknowledged_message(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # PostgreSQL: each request's messages are one row (a run), LevelDB: one batch
    rng = random.Random(7)
    where = str(tmp_path / "db") if engine == "leveldb" else request.getfixturevalue("pg_url")
    acked: dict[str, int] = {}
    for _round in range(3):
        acked.update(run_and_kill(where, rng.uniform(0.3, 1.0)))
        svc = MessagingService(open_store(where))
        found: dict[str, list[int]] = collections.defaultdict(list)
        counts: dict[str, int] = {}
        last = None
        for message in svc.fetch(T).messages:
            name, index, count = message.payload.decode().split("/")
            found[name].append(int(index))
            counts[name] = int(count)
            assert last is None or message.id > last
            last = message.id
        svc.close()
        missing = [name for name in acked if name not in found]
        assert not missing, f"acknowledged requests lost: {missing[:3]}"
        for name, indexes in found.items():
            # all of a request or none of it, and in order
            assert indexes == list(range(counts[name])), f"request {name} is half-written"
        assert acked, "the publisher made no progress"
