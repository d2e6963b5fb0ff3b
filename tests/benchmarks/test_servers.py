"""What the peers are started with and sent, checked without starting them (CI has
neither redis-server nor PostgreSQL; ``make bench-peers-quick`` runs them for real)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from benchmarks.peers import servers
from benchmarks.peers.postgres import insert_sql, select_sql
from benchmarks.peers.servers import (
    PostgresServer,
    RedisServer,
    ServerError,
    free_port,
    postgres_settings,
    redis_command,
)


def test_free_port_can_be_bound_on_loopback() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_redis_runs_on_loopback_with_the_append_only_file_and_no_snapshots(tmp_path: Path) -> None:
    argv = redis_command(6400, tmp_path, "always")
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert argv[0] == "redis-server"
    assert options == {
        "--port": "6400",
        "--bind": "127.0.0.1",
        "--save": "",
        "--appendonly": "yes",
        "--appendfsync": "always",
        "--dir": str(tmp_path),
        "--daemonize": "no",
        "--logfile": str(tmp_path / "redis.log"),
    }
    assert redis_command(1, tmp_path, "everysec")[10] == "everysec"
    with pytest.raises(ValueError):
        redis_command(1, tmp_path, "no")


def test_postgres_commits_are_flushed_before_they_answer(tmp_path: Path) -> None:
    assert postgres_settings(5433, tmp_path) == {
        "port": "5433",
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": str(tmp_path),
        "synchronous_commit": "on",
        "fsync": "on",
    }


def test_a_missing_redis_server_is_an_error_not_a_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servers.shutil, "which", lambda name: None)
    with pytest.raises(ServerError, match="make bench-deps"):
        RedisServer(tmp_path, "always").start()


def test_missing_postgres_binaries_are_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servers.shutil, "which", lambda name: None)
    monkeypatch.setattr(servers.glob, "glob", lambda pattern: [])
    with pytest.raises(ServerError, match="make bench-deps"):
        PostgresServer(tmp_path).start()


def test_stopping_a_server_that_never_started_does_nothing(tmp_path: Path) -> None:
    RedisServer(tmp_path, "everysec").stop()
    PostgresServer(tmp_path).stop()


def test_postgres_publishes_a_batch_in_one_statement_and_reads_a_range() -> None:
    assert insert_sql("pub_100_3_1", 3) == (
        "INSERT INTO m_pub_100_3_1 (payload) VALUES (%s), (%s), (%s)"
    )
    assert select_sql("t") == "SELECT id, payload FROM m_t WHERE id > %s ORDER BY id LIMIT %s"
    with pytest.raises(ValueError):
        insert_sql("t; DROP TABLE state", 1)
