"""The bounds the transaction engines are measured against: the bound over sockets runs
its clients' cycles through its server and syncs, and the engines' medians are read
against it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.txn_engines import _medians
from benchmarks.txn_external import compile_bound


def test_the_socket_bound_answers_every_round_and_leaves_no_file(tmp_path: Path) -> None:
    # Given the bound over sockets, compiled
    program = compile_bound(tmp_path, "socket_bound")
    if program is None:
        pytest.skip("no C compiler")
    log = tmp_path / "bound.log"

    # When 4 clients run their cycles for a fifth of a second, with a commit delay
    out = subprocess.run(
        [str(program), "4", "0.2", str(log), "200"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then cycles went through synced rounds of at most one request per client, split
    # into phases, and the log file is gone
    result = json.loads(out.stdout)
    assert result["cycles_per_second"] > 0
    assert result["syncs_per_second"] > 0
    # (a cycle is three requests; the window's edges may hold up to two of each client's
    # cycles' requests in rounds before it, so the count is checked with that allowance)
    assert result["edits_per_sync"] >= 1
    assert 3 * result["cycles"] <= 4 * result["rounds"] + 2 * 4
    assert set(result["round_us"]) == {"sync", "replies", "calls"}
    assert not log.exists()


def test_the_engines_are_read_against_both_bounds() -> None:
    # Given two rounds with both bounds and a durable and an in-memory point
    def one(bound: float, sockets: float, durable: float) -> dict[str, object]:
        return {
            "bound_16": bound,
            "socket_bound_16": {
                "cycles_per_second": sockets,
                "server_cpu_us_per_cycle": 40.0,
                "round_us": {"sync": 200, "replies": 150, "calls": 50},
            },
            "native": {
                "java_16": {"per_second": durable, "server_cpu_us_per_cycle": 60.0},
                "java_16_in_memory": {"per_second": 3 * durable, "server_cpu_us_per_cycle": 30.0},
            },
        }

    # When their medians are taken
    medians = _medians([one(10_000, 8_000, 6_000), one(12_000, 12_000, 8_000)], ("native",))

    # Then the durable point is a fraction of each bound's median, the in-memory one of none
    assert medians["socket_bound_16"]["per_second"] == 10_000
    assert medians["socket_bound_16"]["range"] == [8_000, 12_000]
    assert medians["native/java_16"]["of_bound"] == round(7_000 / 11_000, 2)
    assert medians["native/java_16"]["of_socket_bound"] == 0.7
    assert "of_socket_bound" not in medians["native/java_16_in_memory"]
