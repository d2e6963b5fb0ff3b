"""Throwaway peer servers on loopback: ``redis-server`` and a PostgreSQL cluster.

Each server lives in a directory of its own under the caller's temporary root, listens on
127.0.0.1 at a free port, and is stopped (and its files left for the caller to remove)
by ``stop()`` or on leaving the ``with`` block. Nothing here touches a system-wide
service or its data: the Debian packages' own instances are never started.

Contracts:

* ``start()`` returns once the server answers; it raises ``ServerError`` with the
  server's log when it does not within ``timeout_s``.
* ``stop()`` is idempotent and never raises for a server that already exited.
* PostgreSQL refuses to run as root, so when this process is root the cluster runs as
  an unprivileged user (``nobody`` unless ``TXMS_BENCH_PG_USER`` names another) and its
  directory is handed to that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from txms_testing.engine import Engine

__all__ = [
    "PostgresServer",
    "RedisServer",
    "ServerError",
    "free_port",
    "postgres_bin_dir",
    "postgres_settings",
    "redis_command",
]


class ServerError(RuntimeError):
    """A peer server could not be found, started or reached."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_port(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


_Server = Engine


# -- Redis --------------------------------------------------------------------------------


def redis_command(port: int, data_dir: Path, appendfsync: str) -> list[str]:
    """``redis-server`` arguments: AOF on with the given fsync policy, no RDB snapshots."""
    if appendfsync not in ("always", "everysec"):
        raise ValueError(f"appendfsync must be 'always' or 'everysec', not {appendfsync!r}")
    return [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", appendfsync,
        "--dir", str(data_dir),
        "--daemonize", "no",
        "--logfile", str(data_dir / "redis.log"),
    ]  # fmt: skip


class RedisServer(_Server):
    """``redis-server`` with the append-only file fsynced ``always`` or ``everysec``."""

    def __init__(self, root: Path, appendfsync: str, timeout_s: float = 30.0) -> None:
        self.dir = root / f"redis-{appendfsync}"
        self.appendfsync = appendfsync
        self.port = 0
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if shutil.which("redis-server") is None:
            raise ServerError("redis-server is not installed (make bench-deps)")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = subprocess.Popen(
            redis_command(self.port, self.dir, self.appendfsync),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not _wait_for_port(self.port, time.monotonic() + self.timeout_s):
            self.stop()
            raise ServerError("redis-server did not start:\n" + self._log())

    def _log(self) -> str:
        log = self.dir / "redis.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


# -- PostgreSQL ---------------------------------------------------------------------------


def postgres_bin_dir() -> Path:
    """Where ``initdb`` and ``pg_ctl`` are: ``pg_config --bindir``, else the newest
    ``/usr/lib/postgresql/*/bin`` (Debian keeps them off ``PATH``)."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, check=True
            )
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    candidates += [Path(p) for p in versions]
    for candidate in candidates:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    raise ServerError("PostgreSQL's initdb/pg_ctl not found (make bench-deps)")


def postgres_settings(port: int, socket_dir: Path) -> dict[str, str]:
    """Server settings: loopback only, every commit flushed to the WAL before it answers.
    Everything else is PostgreSQL's default."""
    return {
        "port": str(port),
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": str(socket_dir),
        "synchronous_commit": "on",
        "fsync": "on",
    }


class PostgresServer(_Server):
    """A cluster made with ``initdb`` (trust auth, user ``postgres``), run by ``pg_ctl``."""

    def __init__(self, root: Path, timeout_s: float = 60.0) -> None:
        self.dir = root / "postgres"
        self.data = self.dir / "data"
        self.port = 0
        self.timeout_s = timeout_s
        self.bin = Path()
        self._started = False

    @property
    def pid(self) -> int:
        """The postmaster's process id (first line of ``postmaster.pid``)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _as_owner(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        return ["runuser", "-u", os.environ.get("TXMS_BENCH_PG_USER", "nobody"), "--"]

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [*self._as_owner(), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            check=False,
        )
        if result.returncode != 0:
            raise ServerError(f"{Path(args[0]).name} failed:\n{result.stdout}{result.stderr}")

    def start(self) -> None:
        self.bin = postgres_bin_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = os.environ.get("TXMS_BENCH_PG_USER", "nobody")
            shutil.chown(self.dir, user)
            # the unprivileged user must be able to reach its directory: open the
            # harness's own temporary root (mkdtemp makes it 0700) for traversal
            root = self.dir.parent
            root.chmod(root.stat().st_mode | 0o011)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.port = free_port()
        options = " ".join(f"-c {k}={v}" for k, v in postgres_settings(self.port, self.dir).items())
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"),
            "-o", options, "-w", "-t", str(int(self.timeout_s)), "start",
        )  # fmt: skip
        self._started = True

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        with contextlib.suppress(ServerError, subprocess.TimeoutExpired):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
