"""The server probe against the real standalone stack: what it reports is what the
workload did (connections, requests, bodies, CPU per thread, LevelDB's counters), and
the CPU meter's settling returns once the server is idle."""

from __future__ import annotations

from pathlib import Path

from benchmarks.cpu_meter import CpuMeter
from benchmarks.server_probe import MODULE, Probe
from tms.client import MessagingClient
from tms.model import TopicId
from tms.standalone import Launched


def test_the_probe_counts_what_the_server_saw(tmp_path: Path) -> None:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    probe = Probe(probe_dir)
    with Launched(tmp_path / "data", module=MODULE, env={"TXMS_PROBE_DIR": str(probe_dir)}) as s:
        topic = TopicId("probe", "t")
        with MessagingClient(s.url) as client:
            client.create_topic(topic)
            before = probe.snapshot()
            for _ in range(3):
                client.publish(topic, [b"x" * 100] * 50)
        with MessagingClient(s.url) as other:
            other.publish(topic, [b"y" * 10])
        delta = Probe.delta(before, probe.snapshot())
        meter = CpuMeter(s.proc.pid)
        assert meter.settle(limit_s=60) < 60  # an idle server settles

    http = delta["http"]
    assert http["connections"] == 1  # the first client's was made before
    assert http["requests"]["POST publish"] == 4
    assert http["bodies"] == 4
    assert http["body_bytes"] > 3 * 50 * 100
    assert sum(http["body_sizes"].values()) == 4
    assert http["max_in_flight"] == 1
    assert "tms-writer" in delta["threads"]  # the writes ran on the writer thread
    assert set(delta["leveldb"]) >= {"compaction_s", "compaction_write_mb", "level0_files"}
