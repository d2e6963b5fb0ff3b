"""A throwaway Spark standalone cluster on loopback, started from the pyspark package:
one Master and ``workers`` Workers with ``cores`` cores each, every port chosen by the
system (port 0), state and logs under one directory. For tests, benchmarks, and trying
the ``tms`` format on a real cluster::

    with LocalCluster(Path("/tmp/cluster")) as cluster:
        driver = cluster.submit("examples/program_states.py", ["--url", ...])
        driver.wait()

Drivers run in client mode on this machine with this interpreter, which the executors
use too (``PYSPARK_PYTHON``); each process of the cluster runs in a process session of
its own, and ``stop`` ends them all, executors included.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

__all__ = ["QUICK_START", "LocalCluster", "kill_session", "session_processes", "spark_home"]

QUICK_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options that start Spark's JVMs about twice as fast on a small machine (no C2
compiler, one GC thread), at some cost in throughput: for short runs such as tests."""

_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\w.]+:\d+)")
_REGISTERED = re.compile(r"(Successfully registered with master)")
_EXECUTOR = "CoarseGrainedExecutorBackend"


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package."""
    import pyspark  # noqa: PLC0415 - only when a cluster is wanted

    return Path(pyspark.__file__).parent


def session_processes(sessions: set[int]) -> list[int]:
    """Pids of the processes that run in any of ``sessions`` (from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[3]) in sessions:
            found.append(int(entry.name))
    return found


def kill_session(session: int) -> None:
    """SIGKILL every process of ``session`` (a process that set up a session of its own,
    and everything it started that did not leave it)."""
    for pid in session_processes({session}):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class LocalCluster:
    """See the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        startup_timeout_s: float = 240,
        java_options: str = "",
        master_port: int = 0,
    ) -> None:
        """``java_options``: for every JVM of the cluster and of its drivers (tests use
        ``QUICK_START``)."""
        self.root = root
        self.java_options = java_options
        self.master_port = master_port
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.startup_timeout_s = startup_timeout_s
        self.master_url = ""
        self._procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        """The environment of the cluster's processes and of drivers submitted to it."""
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.root),
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_DAEMON_JAVA_OPTS": self.java_options,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }

    def _start(self, name: str, args: Sequence[str]) -> Path:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            self._procs.append(
                subprocess.Popen(
                    [str(spark_home() / "bin" / "spark-class"), *args],
                    env=self.env(),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=self.root,
                )
            )
        return log

    def _wait_for(self, log: Path, pattern: re.Pattern[str]) -> str:
        """The first group of ``pattern`` once it appears in ``log``."""
        deadline = time.monotonic() + self.startup_timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            found = pattern.search(text)
            if found:
                return found.group(1)
            if any(p.poll() is not None for p in self._procs):
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the Spark cluster did not start; see {log}:\n{text[-2000:]}")

    def start(self) -> str:
        """Start the Master and the Workers; the master's URL once every Worker has
        registered."""
        self.root.mkdir(parents=True, exist_ok=True)
        common = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        master = ["--host", "127.0.0.1", "--port", str(self.master_port), "--webui-port", "0"]
        log = self._start("master", ["org.apache.spark.deploy.master.Master", *master])
        self.master_url = self._wait_for(log, _MASTER_URL)
        logs = [
            self._start(
                f"worker{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    *common,
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self.root / f"work{i}"),
                    self.master_url,
                ],
            )
            for i in range(self.workers)
        ]
        for worker_log in logs:
            self._wait_for(worker_log, _REGISTERED)
        return self.master_url

    def submit(
        self,
        script: str | Path,
        args: Sequence[str] = (),
        conf: dict[str, str] | None = None,
        **popen: object,
    ) -> subprocess.Popen[bytes]:
        """``spark-submit`` ``script`` to this cluster, in a session of its own."""
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            **(
                {
                    "spark.driver.extraJavaOptions": self.java_options,
                    "spark.executor.extraJavaOptions": self.java_options,
                }
                if self.java_options
                else {}
            ),
            **(conf or {}),
        }
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            [*command, str(script), *args],
            env=self.env(),
            start_new_session=True,
            **popen,
        )

    @property
    def sessions(self) -> set[int]:
        """The process sessions of the Master and the Workers (executors included)."""
        return {p.pid for p in self._procs}

    def executors(self) -> list[int]:
        """Pids of the executor processes the Workers run now."""
        return [pid for pid in session_processes(self.sessions) if _EXECUTOR in _cmdline(pid)]

    def stop(self) -> None:
        """End every process of the cluster (and their executors). Idempotent."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for session in self.sessions:  # whatever is left, executors included
            kill_session(session)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self._procs.clear()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tms.spark.cluster [--dir D] [--workers N] [--cores C] [--port P]``:
    start a cluster, print its master URL, run until Ctrl-C."""
    import argparse  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    parser = argparse.ArgumentParser(description="A Spark standalone cluster on loopback.")
    parser.add_argument("--dir", type=Path, default=None, help="state and logs (a temp dir)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--port", type=int, default=0, help="the master's (0: any free one)")
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="spark-cluster-"))

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # the cluster's processes run in sessions of their own
    with LocalCluster(
        root, workers=args.workers, cores=args.cores, master_port=args.port
    ) as cluster:
        print(f"Spark master at {cluster.master_url} (logs in {root}); Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
