"""A ZooKeeper ensemble of ``QuorumPeerMain`` JVMs on loopback (Debian's ``zookeeper``).

Contracts:

* ``ZooKeeperEnsemble(root, size=3).start()`` writes one configuration and data
  directory per node under ``root``, starts every node, and returns once each answers
  ZooKeeper's ``srvr`` command as leader or follower (a quorum serves). It raises
  ``EngineUnavailableError`` when the package's jar or ``java`` is missing, ``EngineError``
  (with the nodes' logs) when the ensemble does not form within ``timeout_s``. Ports are
  picked free (ZooKeeper cannot bind port 0); a start that loses a port to another
  process is retried with new ports, up to ``attempts`` times.
* ``connect_string`` is ``127.0.0.1:p1,127.0.0.1:p2,...`` for clients (kazoo).
* Nodes can be killed (``SIGKILL``), paused (``SIGSTOP``/``SIGCONT``) and restarted on
  the same ports and data, to inject faults.
* ``stop()`` ends every node (``SIGTERM``, then ``SIGKILL``) and is idempotent; the
  directories are left for the caller to remove.
* ``tick_ms`` sets ZooKeeper's ``tickTime``: sessions may last from 2 to 20 ticks, so
  the default 500 ms allows the 2 s sessions the failover tests use.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from txms_testing.engine import Engine
from txms_testing.errors import EngineError, EngineUnavailableError
from txms_testing.ports import free_ports

__all__ = ["ZooKeeperEnsemble", "ZooKeeperNode", "find_zookeeper_jar"]

_JAR_PLACES = ("/usr/share/java/zookeeper.jar", "/usr/share/zookeeper/zookeeper.jar")
_LOGGERS = ("/usr/share/java/slf4j-simple.jar",)  # optional: without it, ZooKeeper is silent
_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_JVM_OPTIONS = (
    "-Xms16m",
    "-Xmx192m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # the JVMs start and run small: C1 is enough, and faster
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
)


def find_zookeeper_jar() -> Path:
    """The ZooKeeper server jar (its manifest names the jars it needs)."""
    if shutil.which("java") is None:
        raise EngineUnavailableError("java is not installed (make system-deps)")
    for place in _JAR_PLACES:
        if Path(place).exists():
            return Path(place)
    raise EngineUnavailableError("ZooKeeper's jar is not installed (make system-deps)")


def _four_letter(port: int, command: bytes, timeout_s: float = 1.0) -> str:
    """ZooKeeper's four-letter command on ``127.0.0.1:port``; '' when it cannot answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout_s) as sock:
            sock.sendall(command)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperNode:
    """One ``QuorumPeerMain`` of an ensemble (see the module docstring)."""

    def __init__(self, node_id: int, directory: Path, ports: tuple[int, int, int]) -> None:
        self.id = node_id
        self.dir = directory
        self.client_port, self.quorum_port, self.election_port = ports
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "node.log"

    def write_config(self, peers: list[ZooKeeperNode], tick_ms: int) -> None:
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{self.id}\n")
        lines = [
            f"tickTime={tick_ms}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={data}",
            f"clientPort={self.client_port}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr",
            *(f"server.{p.id}=127.0.0.1:{p.quorum_port}:{p.election_port}" for p in peers),
        ]
        (self.dir / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def start(self, jar: Path) -> None:
        """Start the JVM (returns at once; the ensemble waits for the quorum)."""
        if self.running:
            return
        classpath = ":".join([str(jar), *(p for p in _LOGGERS if Path(p).exists())])
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                ["java", *_JVM_OPTIONS, "-cp", classpath, _MAIN, str(self.dir / "zoo.cfg")],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,  # a Ctrl-C meant for the caller's shell stays there
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self) -> str | None:
        """'leader', 'follower' or 'standalone' while the node serves, else None."""
        for line in _four_letter(self.client_port, b"srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signum)

    def kill(self) -> None:
        """``SIGKILL`` the node and reap it."""
        if self.proc is not None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
            self.proc = None

    def stop(self) -> None:
        """``SIGTERM`` the node (``SIGKILL`` after 10 s) and reap it. Idempotent."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def tail_log(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


class ZooKeeperEnsemble(Engine):
    """See the module docstring."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int = 3,
        *,
        tick_ms: int = 500,
        timeout_s: float = 90.0,
        attempts: int = 3,
    ) -> None:
        if size < 1:
            raise ValueError("an ensemble needs at least one node")
        self.root = Path(root)
        self.size = size
        self.tick_ms = tick_ms
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.nodes: list[ZooKeeperNode] = []
        self._jar: Path | None = None

    @property
    def connect_string(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def start(self) -> None:
        self._jar = find_zookeeper_jar()
        failure: EngineError | None = None
        for attempt in range(1, self.attempts + 1):
            self._configure(attempt)
            for node in self.nodes:
                node.start(self._jar)
            try:
                self.wait_for_quorum(self.timeout_s)
                return
            except EngineError as exc:
                failure = exc
                self.stop()
                if not self._lost_a_port():
                    break  # not a port clash: new ports would not help
        assert failure is not None
        raise failure

    def _configure(self, attempt: int) -> None:
        ports = free_ports(3 * self.size)
        self.nodes = [
            ZooKeeperNode(
                i + 1,
                self.root / f"zk-{attempt}-{i + 1}",
                (ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]),
            )
            for i in range(self.size)
        ]
        for node in self.nodes:
            node.write_config(self.nodes, self.tick_ms)

    def _lost_a_port(self) -> bool:
        return any("Address already in use" in node.tail_log(200_000) for node in self.nodes)

    def wait_for_quorum(self, timeout_s: float) -> None:
        """Return once every running node serves as leader or follower."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            running = [node for node in self.nodes if node.running]
            if len(running) < len(self.nodes) and not any(n.proc is None for n in self.nodes):
                break  # a JVM exited by itself
            modes = [node.mode() for node in running]
            if running and all(m in ("leader", "follower", "standalone") for m in modes):
                return
            time.sleep(0.2)
        logs = "\n".join(f"--- node {n.id} ---\n{n.tail_log()}" for n in self.nodes)
        raise EngineError(f"the ZooKeeper ensemble did not form within {timeout_s} s:\n{logs}")

    def leader(self) -> ZooKeeperNode | None:
        """The node that is the ensemble's leader now, if any."""
        for node in self.nodes:
            if node.mode() == "leader":
                return node
        return None

    def restart(self, node: ZooKeeperNode) -> None:
        """Start a killed or stopped node again (same ports and data)."""
        assert self._jar is not None, "start the ensemble first"
        node.start(self._jar)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
