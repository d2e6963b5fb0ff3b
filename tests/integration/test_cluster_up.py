"""``tms cluster up`` (``make run-cluster``): the whole topology starts on this machine,
its printed addresses work, and Ctrl-C stops every part of it."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

from tms.client import MessagingClient
from tms.model import TopicId
from txms_testing import ServiceProcess
from txms_testing.errors import EngineUnavailableError
from txms_testing.postgres import postgres_bin_dir
from txms_testing.zookeeper import find_zookeeper_jar


def descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in _state(p)}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_cluster_up_serves_and_stops_on_ctrl_c() -> None:
    try:
        find_zookeeper_jar(), postgres_bin_dir()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    up = ServiceProcess([sys.executable, "-m", "tms.cli", "cluster", "up"], "cluster").start()
    try:
        up.wait_for("Ctrl-C stops it all", 180)
        urls = re.findall(r"messaging +(http://\S+)", up.output(200))
        assert len(urls) == 3
        parts = descendants(up.pid)
        assert len(parts) >= 3 + 2 + 3  # ZooKeeper nodes, transaction servers, instances
        # the printed addresses serve
        with MessagingClient(urls) as client:
            status = client.cluster()
            assert sorted(i["url"] for i in status["instances"]) == sorted(urls)
            topic = TopicId("demo", "t1")
            client.create_topic(topic)
            client.publish(topic, [b"hello"])
            assert [m[1] for m in client.poll(topic).messages] == [b"hello"]
        # When it gets Ctrl-C
        up.signal(signal.SIGINT)
        assert up.proc is not None and up.proc.wait(120) == 0
        # Then it stopped every part of it
        assert "tms cluster: stopped" in up.output()
        assert alive(parts) == set()
    finally:
        up.kill()
