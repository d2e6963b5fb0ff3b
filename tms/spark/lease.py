"""Leases on the transactions of Spark jobs: a job's transaction lives as long as its
driver does, however long the job runs, and ends within seconds of the driver's death.

The transaction is a short one with timeout ``txTimeoutS``. The driver process that
started it *holds* it: it writes a lease file naming the transaction and the holder (the
driver process, by pid and start time) into a private directory, and makes sure a
*keeper* runs: one small process per machine and user (``python -m tms.spark.lease``,
in a session of its own, so killing the driver's process group leaves it alive). Every
half second the keeper looks at the leases:

* holder alive: it renews the transaction (``extendTimeout``, txms's extension of
  Tephra's protocol) every quarter of its timeout, so a job longer than the timeout is
  never invalidated under a live driver;
* holder gone (killed, crashed, its session stopped): it **invalidates** the transaction
  at once; markers the job may have published stay invisible, and transactional
  consumers move past them;
* transaction no longer in progress (committed, aborted, timed out): it forgets it.

The job's commit or abort releases the lease (removes the file). If the keeper itself
dies with the driver (the machine is gone), nobody renews: the transaction times out and
is invalidated by the transaction manager within ``txTimeoutS``. If the keeper dies and
the driver lives, a job that outlasts the timeout fails at commit, showing nothing.

The keeper exits when it has held nothing for a while; the next ``hold`` starts a new
one. One ``flock`` on ``keeper.lock`` decides which keeper runs.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path

from txms_common.retry import RetryNTimes
from txn.errors import InvalidArgumentError, TransactionNotInProgressError, TxError
from txn.rpc.client import ThriftTxClient
from txn.rpc.tls import ClientTls

__all__ = ["Keeper", "Lease", "LeaseRegistry", "holder_alive", "process_start"]

log = logging.getLogger(__name__)

_LOCK = "keeper.lock"
_SUFFIX = ".lease"


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, from ``/proc``), which
    tells it from a later process with the same pid; None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def holder_alive(pid: int, start: str | None) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs (a zombie does
    not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return start is None  # no /proc here: the pid exists, that is all we know
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and (start is None or fields[19] == start)


@dataclass(frozen=True, slots=True)
class Lease:
    """A transaction held for a driver: renewed every ``timeout_s / 4`` while the
    process ``holder_pid`` (started at ``holder_start``) lives; ``tag`` groups the
    leases of one streaming query."""

    tx_id: int
    tx_server: str
    timeout_s: int
    holder_pid: int
    holder_start: str | None
    tag: str | None = None
    tls: dict[str, str | None] | None = None
    """How to reach the transaction server with TLS (``txn.rpc.tls.ClientTls`` fields)."""

    @classmethod
    def for_this_driver(
        cls,
        tx_id: int,
        tx_server: str,
        timeout_s: int,
        tag: str | None = None,
        tls: dict[str, str | None] | None = None,
    ) -> Lease:
        """A lease held by this process's parent: Spark runs the data source's driver
        side in Python workers forked from a daemon that lives as long as the driver."""
        parent = os.getppid()
        return cls(tx_id, tx_server, timeout_s, parent, process_start(parent), tag, tls)


def default_directory() -> Path:
    return Path(tempfile.gettempdir()) / f"txms-spark-leases-{os.getuid()}"


def _spawn_keeper(directory: Path) -> None:
    subprocess.Popen(  # our own module, with this interpreter
        [sys.executable, "-m", "tms.spark.lease", "--dir", str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


class LeaseRegistry:
    """The lease files of one directory (private to the user)."""

    def __init__(
        self,
        directory: Path | None = None,
        spawn: Callable[[Path], None] = _spawn_keeper,
    ) -> None:
        self.directory = directory or default_directory()
        self._spawn = spawn

    def ensure_dir(self) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.directory

    def _path(self, tx_id: int) -> Path:
        return self.ensure_dir() / f"{tx_id}{_SUFFIX}"

    def hold(self, lease: Lease) -> None:
        """Write the lease (atomically), then make sure a keeper runs."""
        path = self._path(lease.tx_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(lease)))
        os.replace(tmp, path)
        self.ensure_keeper()

    def release(self, tx_id: int) -> None:
        """Stop holding ``tx_id`` (idempotent)."""
        self._path(tx_id).unlink(missing_ok=True)

    def take_tagged(self, tag: str) -> list[Lease]:
        """Remove and return the leases tagged ``tag``."""
        taken = []
        for lease in self.leases():
            if lease.tag == tag:
                self.release(lease.tx_id)
                taken.append(lease)
        return taken

    def leases(self) -> list[Lease]:
        out = []
        for path in sorted(self.ensure_dir().glob(f"*{_SUFFIX}")):
            with contextlib.suppress(OSError, ValueError, TypeError):
                out.append(Lease(**json.loads(path.read_text())))
        return out

    def ensure_keeper(self) -> None:
        """Start a keeper unless one holds the lock."""
        fd = os.open(self.ensure_dir() / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a keeper runs; it sees the new lease at its next look
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        self._spawn(self.directory)


class Keeper:
    """The keeper's loop (see the module docstring); ``step`` is one look at the leases."""

    def __init__(
        self, registry: LeaseRegistry, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.registry = registry
        self._monotonic = monotonic
        self._clients: dict[str, ThriftTxClient] = {}
        self._renewed: dict[int, float] = {}

    def _client(self, lease: Lease) -> ThriftTxClient:
        key = json.dumps([lease.tx_server, lease.tls])
        if key not in self._clients:
            tls = ClientTls(**lease.tls) if lease.tls else None
            self._clients[key] = ThriftTxClient(
                lease.tx_server, retry=RetryNTimes(1), timeout_s=5, tls=tls
            )
        return self._clients[key]

    def step(self) -> int:
        """Renew, invalidate or forget each lease once; the number still held."""
        now = self._monotonic()
        held = 0
        leases = self.registry.leases()
        for lease in leases:
            last = self._renewed.setdefault(lease.tx_id, now)
            try:
                if not holder_alive(lease.holder_pid, lease.holder_start):
                    self._client(lease).invalidate(lease.tx_id)
                    log.info("driver %d is gone: invalidated %d", lease.holder_pid, lease.tx_id)
                    self._forget(lease)
                    continue
                if now - last >= max(lease.timeout_s / 4, 0.5):
                    self._client(lease).extend_timeout(lease.tx_id, lease.timeout_s)
                    self._renewed[lease.tx_id] = now
            except (TransactionNotInProgressError, InvalidArgumentError):
                self._forget(lease)  # finished (or not ours to renew)
                continue
            except TxError as exc:
                log.warning("lease of %d: %s", lease.tx_id, exc)
                if now - last > lease.timeout_s:
                    self._forget(lease)  # timed out by now: the manager invalidates it
                    continue
            held += 1
        known = {lease.tx_id for lease in leases}
        for tx_id in set(self._renewed) - known:
            del self._renewed[tx_id]
        return held

    def _forget(self, lease: Lease) -> None:
        self.registry.release(lease.tx_id)
        self._renewed.pop(lease.tx_id, None)

    def close(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int | None]:
    """The keeper lock, or None when another keeper holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def run_keeper(
    registry: LeaseRegistry, tick_s: float = 0.5, idle_s: float = 10.0, keeper: Keeper | None = None
) -> None:
    """Look at the leases every ``tick_s`` until none was held for ``idle_s``."""
    keeper = keeper or Keeper(registry)
    lock_path = registry.directory / _LOCK
    with _locked(lock_path) as fd:
        if fd is None:
            return
        idle_since = time.monotonic()
        try:
            while True:
                if keeper.step():
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= idle_s:
                    # Give the lock up first, then look once more: a lease written
                    # meanwhile either sees the lock free (and starts a keeper) or is
                    # seen here (and this keeper carries on if it gets the lock back).
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    if not registry.leases():
                        return
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return
                    idle_since = time.monotonic()
                time.sleep(tick_s)
        finally:
            keeper.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Renew the transactions of Spark jobs.")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--tick-s", type=float, default=0.5)
    parser.add_argument("--idle-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    registry = LeaseRegistry(args.dir)
    handler = RotatingFileHandler(
        registry.ensure_dir() / "keeper.log", maxBytes=1_000_000, backupCount=1
    )
    logging.basicConfig(
        level=logging.INFO,
        handlers=[handler],
        format="%(asctime)s %(process)d %(levelname)s %(message)s",
    )
    run_keeper(registry, args.tick_s, args.idle_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
