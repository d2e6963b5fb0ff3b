"""The whole harness on txms and the limits (no peers): servers up, every workload,
results file, tables and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.peers.base import Workload
from benchmarks.peers.report import compare, read_results
from benchmarks.peers.run import main, run
from benchmarks.peers.workloads import Settings
from tests.benchmarks.fakes import FORK_WARNING

pytestmark = pytest.mark.filterwarnings(FORK_WARNING)

TINY = Settings(
    seconds=0.1,
    message_bytes=(100,),
    batches=(1, 10),
    producers=(1, 2),
    consume_messages=2000,
    tail_pages=(10,),
    latency_rates=(100, 3000),
    latency_bytes=(100,),
    latency_seconds=0.2,
    tx_batches=(10,),
    tx_producers=(2,),
    cycle_clients=(1,),
    growth_sizes=(2000,),
    read_seconds=0.01,
    pipeline_connections=(2,),
    pipeline_window=8,
)


def test_a_run_measures_every_workload_and_compares_with_the_limits(tmp_path: Path) -> None:
    # When txms (over REST and over the binary protocol) and both limits are run through
    # every workload
    systems = ["txms", "txms-rpc", "txms-lean", "plyvel", "http-echo"]
    results = run(TINY, systems, tmp_path, progress=False)
    # Then each txms has a figure for every workload it takes part in
    assert {r.workload for r in results.records if r.system == "txms"} == {
        w.value for w in Workload if w != Workload.PIPELINED
    }
    assert {r.workload for r in results.records if r.system == "txms-rpc"} == {
        w.value for w in Workload if w != Workload.TX_CYCLE
    }
    latency = {(r.system, r.params["rate"]) for r in results.records if r.workload == "latency"}
    assert latency == {("txms", 100), ("txms-rpc", 100), ("txms-rpc", 3000), ("plyvel", 100)}
    assert set(results.systems) == set(systems)
    assert results.systems["plyvel"]["kind"] == "limit"
    assert results.meta["machine"]["cpus"] >= 1
    assert results.meta["settings"]["batches"] == (1, 10)
    # and every point with a limit has txms's share of it, none a peer ratio
    rows = compare(results.records, results.systems)
    publish = [r for r in rows if r.workload == "publish"]
    assert len(publish) == 4
    assert all(r.limit in ("plyvel", "http-echo") and r.vs_limit for r in publish)
    assert all(r.best_peer is None and r.vs_peer is None for r in rows)
    # a transactional publish is held to the limits of the plain one
    [tx] = [r for r in rows if r.workload == "tx_publish"]
    assert tx.limit in ("plyvel", "http-echo") and tx.vs_limit
    assert all("other_cpus" in r.extra for r in results.records)
    assert results.meta["errors"] == []


def test_the_command_writes_results_and_reports_on_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "peers-quick.json"
    args = ["--quick", "--systems", "txms,plyvel", "--workloads", "tx_cycle", "--no-progress"]
    assert main([*args, "--seconds", "0.1", "--out", str(out), "--no-plots"]) == 0
    results = read_results(out)
    assert results.meta["quick"] is True
    assert {(r.system, r.params["clients"]) for r in results.records} == {
        ("txms", 1),
        ("txms", 8),
        ("plyvel", 1),
        ("plyvel", 8),
    }
    printed = capsys.readouterr().out
    assert "### Transaction cycles (durable transactions/s)" in printed
    # and the report alone, from the file
    table = tmp_path / "table.md"
    assert main(["--report", str(out), "--no-plots", "--markdown", str(table)]) == 0
    assert table.read_text().startswith("### Transaction cycles")


def test_an_unknown_system_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown systems: kafka"):
        run(TINY, ["txms", "kafka"], tmp_path, progress=False)


def test_a_failing_point_is_reported_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a limit whose publish breaks
    from benchmarks.peers.limits import HttpEchoLimit

    def broken(self: HttpEchoLimit, topic: str, batch: object) -> object:
        raise ConnectionRefusedError("echo is down")

    monkeypatch.setattr(HttpEchoLimit, "publisher", broken)
    settings = Settings(
        seconds=0.05,
        message_bytes=(100,),
        batches=(1,),
        producers=(1,),
        tx_batches=(1,),
        tx_producers=(1,),
        workloads=frozenset({Workload.PUBLISH}),
    )
    # When the run measures it beside plyvel
    results = run(settings, ["plyvel", "http-echo"], tmp_path, progress=False)
    # Then the failure is in the results, and the other system was still measured
    [error] = results.meta["errors"]
    assert error["task"] == "publish 100 B x1 p1 http-echo"
    assert "echo is down" in error["error"]
    assert [r.system for r in results.records] == ["plyvel"]


def test_the_latency_points_can_be_chosen(tmp_path: Path) -> None:
    out = tmp_path / "latency.json"
    args = ["--systems", "plyvel", "--workloads", "latency", "--no-progress", "--no-plots"]
    latency = ["--latency-rates", "300,700", "--latency-seconds", "0.1"]
    assert main([*args, *latency, "--out", str(out)]) == 0
    results = read_results(out)
    assert sorted((r.params["rate"], r.params["message_bytes"]) for r in results.records) == [
        (300, 100),
        (700, 100),
    ]
