"""The ``txn`` admin commands against a real server (Tephra's TransactionAdminTest)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.txn.harness import TxSystem, thrift_system
from txn.cli import main
from txn.rpc.client import ThriftTxClient


@pytest.fixture
def system() -> Iterator[TxSystem]:
    with thrift_system() as s:
        yield s


@pytest.fixture
def server(system: TxSystem) -> str:
    assert isinstance(system.client, ThriftTxClient)
    return f"{system.client.host}:{system.client.port}"


def test_usage_errors_exit_2_with_usage_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage:")


def test_invalid_size_and_truncate(
    system: TxSystem, server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    txs = [system.manager.start_short() for _ in range(2)]
    for tx in txs:
        system.manager.invalidate(tx.transaction_id)
    assert main(["invalid-size", "--server", server]) == 0
    assert capsys.readouterr().out == "Invalid list size: 2\n"
    assert main(["truncate-invalid-tx", str(txs[0].transaction_id), "--server", server]) == 0
    assert capsys.readouterr().out == "removed 1 of 1 ids from the invalid list\n"
    assert system.manager.invalid_size() == 1


def test_truncate_before_fails_while_older_transactions_run(
    system: TxSystem, server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    running = system.manager.start_short()
    invalid = system.manager.start_short()
    system.manager.invalidate(invalid.transaction_id)
    system.clock.advance(10)
    later = str(system.clock.now_ms())
    assert main(["truncate-invalid-tx-before", later, "--server", server]) == 1
    assert "are in-progress" in capsys.readouterr().err
    system.manager.abort(running)
    assert main(["truncate-invalid-tx-before", later, "--server", server]) == 0
    assert system.manager.invalid_size() == 0


def test_status_and_snapshot(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--server", server]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["status", "OK"]
    out_file = tmp_path / "snap"
    assert main(["snapshot", "--server", server, "--out", str(out_file), "-o", "json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["invalid"] == [] and out_file.read_bytes()[:1] == b"\x08"


def test_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--server", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err.startswith("txn:")


def test_inspect_a_state_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from txn import LocalDirStorage, TransactionManager, TransactionStateStore, TxConfig

    manager = TransactionManager(
        TxConfig(cleanup_interval_s=0, snapshot_interval_s=0),
        TransactionStateStore(LocalDirStorage(tmp_path)),
    )
    manager.start()
    tx = manager.start_long()
    manager.stop()
    assert main(["inspect", "--data-dir", str(tmp_path), "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert str(tx.transaction_id) in report["latest_snapshot"]["in_progress"]
