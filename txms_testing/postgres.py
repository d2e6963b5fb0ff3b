"""A throwaway PostgreSQL cluster on loopback (Debian's ``postgresql``: ``initdb`` +
``pg_ctl``).

Contracts:

* ``PostgresCluster().start()`` makes a new cluster in a fresh temporary directory
  (``initdb``, trust authentication for the superuser ``postgres``), starts it on a free
  127.0.0.1 port with its unix socket in that directory, and returns once it accepts
  connections. ``EngineUnavailableError`` when the binaries are missing; ``EngineError``
  (with the server's log) when it does not start within ``timeout_s``.
* PostgreSQL refuses to run as root. When this process is root, every PostgreSQL
  command runs as ``run_as`` (default ``nobody``) through ``runuser``, and the
  directory belongs to that user. It is made with ``tempfile.mkdtemp`` directly in the
  system's temporary directory, because the user must be able to reach it (a directory
  under another 0700 one, such as pytest's, would be out of its reach).
* Every commit is flushed (``fsync``, ``synchronous_commit`` on): the durability the
  transaction log relies on is real.
* ``create_database(name)`` gives a test a database of its own in a shared cluster.
* ``stop()`` stops the server (``pg_ctl stop -m immediate``: nothing is kept) and
  removes the directory; it is idempotent.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from txms_testing.engine import Engine
from txms_testing.errors import EngineError, EngineUnavailableError
from txms_testing.ports import free_port

__all__ = ["PostgresCluster", "postgres_bin_dir"]


def postgres_bin_dir() -> Path:
    """Where ``initdb`` and ``pg_ctl`` are: the newest ``/usr/lib/postgresql/*/bin``
    (Debian keeps them off ``PATH``), else ``PATH``."""
    places = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    for place in places:
        if (Path(place) / "initdb").exists() and (Path(place) / "pg_ctl").exists():
            return Path(place)
    initdb = shutil.which("initdb")
    if initdb is not None and shutil.which("pg_ctl") is not None:
        return Path(initdb).parent
    raise EngineUnavailableError("PostgreSQL's initdb/pg_ctl are not installed (make system-deps)")


class PostgresCluster(Engine):
    """See the module docstring."""

    def __init__(
        self,
        *,
        run_as: str | None = None,
        timeout_s: float = 60.0,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.run_as = run_as if run_as is not None else ("nobody" if os.geteuid() == 0 else "")
        self.timeout_s = timeout_s
        self.extra_settings = dict(settings or {})
        self.dir = Path()
        self.port = 0
        self.bin = Path()
        self._started = False

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.dir / "socket"

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``database`` over loopback TCP."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def settings(self) -> dict[str, str]:
        return {
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "on",
            "synchronous_commit": "on",
            "max_connections": "200",
            **self.extra_settings,
        }

    def _as_owner(self) -> list[str]:
        return ["runuser", "-u", self.run_as, "--"] if self.run_as else []

    def _run(self, *args: str) -> str:
        try:
            result = subprocess.run(
                [*self._as_owner(), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise EngineError(f"{Path(args[0]).name} did not finish: {exc}") from exc
        if result.returncode != 0:
            raise EngineError(
                f"{Path(args[0]).name} failed:\n{result.stdout}{result.stderr}{self.tail_log()}"
            )
        return result.stdout

    def tail_log(self, chars: int = 3000) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def start(self) -> None:
        self.bin = postgres_bin_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="txms-pg-"))
        try:
            self.socket_dir.mkdir()
            if self.run_as:
                for path in (self.dir, self.socket_dir):
                    shutil.chown(path, self.run_as)
            self._run(
                str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                "--no-sync",  # a throwaway cluster: its template files need no fsync
            )  # fmt: skip
            self.port = free_port()
            options = " ".join(f"-c {k}={v}" for k, v in self.settings().items())
            self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"),
                "-o", options, "-w", "-t", str(int(self.timeout_s)), "start",
            )  # fmt: skip
        except BaseException:
            self._remove()
            raise
        self._started = True

    @property
    def pid(self) -> int:
        """The postmaster's process id."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def create_database(self, name: str) -> str:
        """Create database ``name`` (an identifier: letters, digits, underscores) and
        return its URL."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"not a plain database name: {name!r}")
        self._run(
            str(self.bin / "psql"), "-h", str(self.socket_dir), "-p", str(self.port),
            "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
            "-c", f"CREATE DATABASE {name}",
        )  # fmt: skip
        return self.url(name)

    def stop(self) -> None:
        if self._started:
            self._started = False
            # immediate: the cluster is thrown away, so its shutdown checkpoint (seconds
            # of fsync for every database made) would be wasted
            with contextlib.suppress(EngineError):
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        self._remove()

    def _remove(self) -> None:
        if self.dir != Path() and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
