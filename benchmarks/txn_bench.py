"""Transaction-manager benchmark: durable full cycles per second.

A cycle is ``start_short`` + ``can_commit`` (one 16-byte change key) + ``commit``; every
call is fsynced before it returns. Measured in one run:

* in-process: N threads calling a ``TransactionManager`` on a local state directory;
* over Thrift: ``txn serve`` in its own process, N concurrent client connections spread
  over client processes;
* RPC floors, same client machinery: ``status()`` against ``txn serve`` (our server's
  per-call cost with no state change and no fsync) and an ``echo`` call against
  thriftpy2's stock threaded server;
* saturation: lean cycles from 16 and 64 connections on one event loop in this process,
  with the CPU used by the server, the generator and the machine meanwhile (where the
  server's single loop runs out); and the same against ``txn serve --in-memory`` (no log:
  the server's capacity without the disk);
* disk floor: ``write`` + ``fdatasync`` of 600-byte appends (a 16-client batch) from 1 and
  4 threads, in the state directory's file system: what the disk allows;
* engines: the native and the Python engine alternately against the disk's bound
  (``benchmarks.txn_engines``).

    python -m benchmarks.txn_bench [--quick] [--seconds S] [--out FILE] [--server-config TOML]
                                   [--engine auto|native|python] [--rounds N]

Results go to ``benchmarks/results/txn.json`` and are printed as a table. Never assert
timings in tests; this is where they are measured.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import new_report, run_threads, write_report
from benchmarks.txn_engines import compare_engines
from benchmarks.txn_external import cpu_seconds, group_commit_bound, java_sections
from txms_common.loop import new_event_loop
from txn import engine

RESULTS = Path(__file__).with_name("results")
ECHO_IDL = Path(__file__).with_name("echo.thrift")


# -- client workers (run in child processes) ------------------------------------------


def _client_worker(  # noqa: PLR0917 - a multiprocessing target takes positional args
    kind: str,
    address: tuple[str, int],
    threads: int,
    seconds: float,
    barrier: Any,
    out: Any,
) -> None:
    """Run ``threads`` client threads; each warms up, waits for every client in every
    process at ``barrier``, then calls for exactly ``seconds``."""
    counts = [0] * threads
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def run(i: int) -> None:
        op = _make_op(kind, address, i)
        op()  # connect and warm up
        barrier.wait()
        deadline = time.perf_counter() + seconds
        n = 0
        lat = latencies[i]
        while (t0 := time.perf_counter()) < deadline:
            op()
            lat.append(time.perf_counter() - t0)
            n += 1
        counts[i] = n

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    sample = [x for lat in latencies for x in lat[:: max(1, len(lat) // 2000)]]
    out.put((sum(counts), sample))


def _frame(name: bytes, args: bytes) -> bytes:
    body = struct.pack(">Ii", 0x80010001, len(name)) + name + struct.pack(">i", 1) + args
    return struct.pack(">i", len(body)) + body


_START = _frame(b"startShortClientId", b"\x0b\x00\x01" + struct.pack(">i", 5) + b"bench\x00")


def _result(body: bytes, name: bytes) -> bytes:
    """The result struct of a reply frame's ``body`` (after its length), which must be a
    successful REPLY."""
    if struct.unpack_from(">I", body)[0] != 0x80010002:
        raise RuntimeError(f"{name!r} failed: {body!r}")
    return body[8 + len(name) + 4 :]  # version+type, name length, name, seqid


def _tx_id(start_result: bytes) -> bytes:
    """The transaction id (big-endian i64) in a startShortClientId result."""
    if start_result[:3] != b"\x0c\x00\x00" or start_result[3:6] != b"\x0a\x00\x01":
        raise RuntimeError(f"unexpected start reply {start_result!r}")
    return start_result[6:14]  # TTransaction field 1


def _can_commit_frame(tx_id: bytes, key: bytes) -> bytes:
    args = b"\x0a\x00\x01" + tx_id + b"\x0e\x00\x02\x0b" + struct.pack(">ii", 1, 16) + key
    return _frame(b"canCommitOrThrow", args + b"\x00")


def _commit_frame(tx_id: bytes) -> bytes:
    return _frame(b"commitOrThrow", b"\x0a\x00\x01" + tx_id + b"\x0a\x00\x02" + tx_id + b"\x00")


def _key(i: int) -> bytes:
    return f"key-{os.getpid()}-{i}".encode().ljust(16, b".")


class _LeanClient:
    """A load generator speaking the wire protocol with pre-encoded frames: it costs the
    client a few microseconds per call, so the server's own capacity shows. Every reply
    is checked to be a success."""

    def __init__(self, address: tuple[str, int], i: int) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.key = _key(i)

    def _call(self, frame: bytes, name: bytes) -> bytes:
        self.sock.sendall(frame)
        data = self.sock.recv(65536)
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            data += self.sock.recv(65536)
        return _result(data[4:], name)

    def status(self) -> None:
        self._call(_frame(b"status", b"\x00"), b"status")

    def cycle(self) -> None:
        tx_id = _tx_id(self._call(_START, b"startShortClientId"))
        if self._call(_can_commit_frame(tx_id, self.key), b"canCommitOrThrow") != b"\x00":
            raise RuntimeError("canCommitOrThrow did not succeed")
        if self._call(_commit_frame(tx_id), b"commitOrThrow") != b"\x00":
            raise RuntimeError("commitOrThrow did not succeed")


async def _async_cycles(address: tuple[str, int], i: int, deadline: float) -> int:
    """One connection doing lean cycles until ``deadline``; the number done."""
    reader, writer = await asyncio.open_connection(*address)

    async def call(frame: bytes, name: bytes) -> bytes:
        writer.write(frame)
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return _result(await reader.readexactly(size), name)

    key = _key(i)
    done = 0
    try:
        while time.perf_counter() < deadline:
            tx_id = _tx_id(await call(_START, b"startShortClientId"))
            if await call(_can_commit_frame(tx_id, key), b"canCommitOrThrow") != b"\x00":
                raise RuntimeError("canCommitOrThrow did not succeed")
            if await call(_commit_frame(tx_id), b"commitOrThrow") != b"\x00":
                raise RuntimeError("commitOrThrow did not succeed")
            done += 1
    finally:
        writer.close()
    return done


def _machine_idle() -> tuple[int, int]:
    """(all, idle + iowait) jiffies of the machine so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values), values[3] + values[4]


def _saturate(
    address: tuple[str, int], server_pid: int, connections: int, seconds: float
) -> dict[str, Any]:
    """Lean cycles from ``connections`` connections on one event loop in this process (a
    generator that needs one CPU wake-up per burst of replies, not one per client), with
    the CPU the server, this generator and the whole machine used meanwhile."""

    async def drive() -> int:
        deadline = time.perf_counter() + seconds
        counts = await asyncio.gather(
            *(_async_cycles(address, i, deadline) for i in range(connections))
        )
        return sum(counts)

    server0, mine0, (all0, idle0) = cpu_seconds(server_pid), time.process_time(), _machine_idle()
    started = time.perf_counter()
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        cycles = runner.run(drive())
    elapsed = time.perf_counter() - started
    all1, idle1 = _machine_idle()
    return {
        "per_second": round(cycles / elapsed, 1),
        "server_cpus": round((cpu_seconds(server_pid) - server0) / elapsed, 2),
        "generator_cpus": round((time.process_time() - mine0) / elapsed, 2),
        "machine_busy": round(1 - (idle1 - idle0) / max(1, all1 - all0), 2),
    }


def _saturation(
    section: dict[str, Any], label: str, server: Any, address: tuple[str, int], seconds: float
) -> None:
    """``_saturate`` at 16 and 64 connections into ``section``, printed."""
    for n in (16, 64):
        section[str(n)] = r = _saturate(address, server.proc.pid, n, seconds)
        print(f"{label}  {n:>2} connections: {r}", flush=True)


def _make_op(kind: str, address: tuple[str, int], i: int) -> Callable[[], object]:
    if kind.startswith("lean-"):
        lean = _LeanClient(address, i)
        return lean.cycle if kind == "lean-cycle" else lean.status
    if kind == "echo":
        import thriftpy2
        from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory
        from thriftpy2.rpc import make_client
        from thriftpy2.transport.framed import TCyFramedTransportFactory

        echo = thriftpy2.load(str(ECHO_IDL), module_name="echo_thrift")
        conn = make_client(
            echo.Echo,
            *address,
            trans_factory=TCyFramedTransportFactory(),
            proto_factory=TCyBinaryProtocolFactory(),
        )
        return lambda: conn.echo("ping")

    from txms_common.retry import RetryNTimes
    from txn.rpc.client import ThriftTxClient

    client = ThriftTxClient(address, client_id=f"bench-{i}", pool_size=1, retry=RetryNTimes(1))
    if kind == "status":
        return client.status
    key = f"key-{os.getpid()}-{i}".encode().ljust(16, b".")

    def cycle() -> None:
        tx = client.start_short()
        client.can_commit_or_throw(tx, [key])
        client.commit_or_throw(tx)

    return cycle


def _drive_clients(
    kind: str, address: tuple[str, int], clients: int, seconds: float
) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    procs_n = min(clients, 4)
    per_proc = [clients // procs_n + (1 if i < clients % procs_n else 0) for i in range(procs_n)]
    barrier = ctx.Barrier(clients + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_client_worker, args=(kind, address, n, seconds, barrier, out))
        for n in per_proc
    ]
    for p in procs:
        p.start()
    barrier.wait()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    total = sum(r[0] for r in results)
    sample = sorted(x for r in results for x in r[1])
    return _summary(total, seconds, sample)


def _summary(total: int, elapsed: float, sample: list[float]) -> dict[str, Any]:
    def pct(q: float) -> float:
        return round(sample[min(len(sample) - 1, int(q * len(sample)))] * 1e3, 3) if sample else 0.0

    return {
        "ops": total,
        "seconds": round(elapsed, 3),
        "per_second": round(total / elapsed, 1),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
    }


# -- servers ----------------------------------------------------------------------------


def _start_txn_server(
    data_dir: Path | None, config: Path | None = None
) -> tuple[Any, tuple[str, int]]:
    """``txn serve`` on port 0 with its state in ``data_dir`` (None: in memory)."""
    from tests.integration.procs import ServerProcess

    server = ServerProcess(data_dir, *(("--config", str(config)) if config else ()))
    return server, server.start()


def _disk_floor(directory: Path, threads: int, seconds: float) -> dict[str, Any]:
    """Appends of 600 bytes, each followed by ``fdatasync``, from ``threads`` threads on
    one file (writes serialised, syncs concurrent): syncs per second."""
    path = directory / f"disk-floor-{threads}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    lock = threading.Lock()
    data = b"x" * 600
    deadline = time.perf_counter() + seconds
    counts = [0] * threads

    def run(i: int) -> None:
        while time.perf_counter() < deadline:
            with lock:
                os.write(fd, data)
            os.fdatasync(fd)
            counts[i] += 1

    try:
        workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        os.close(fd)
        path.unlink()
    return {"syncs_per_second": round(sum(counts) / seconds, 1)}


def _echo_server_main(port_out: Any) -> None:
    import thriftpy2
    from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory
    from thriftpy2.rpc import make_server
    from thriftpy2.transport.framed import TCyFramedTransportFactory

    echo = thriftpy2.load(str(ECHO_IDL), module_name="echo_thrift")

    class Handler:
        def echo(self, s: str) -> str:
            return s

    import socket

    with socket.socket() as probe:  # thriftpy2's make_server refuses port 0
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = make_server(
        echo.Echo,
        Handler(),
        "127.0.0.1",
        port,
        trans_factory=TCyFramedTransportFactory(),
        proto_factory=TCyBinaryProtocolFactory(),
    )
    port_out.put(port)
    server.serve()


# -- in-process ---------------------------------------------------------------------------


def _in_process(data_dir: Path, threads: int, seconds: float) -> dict[str, Any]:
    from txn import LocalDirStorage, TransactionManager, TransactionStateStore, TxConfig

    manager = TransactionManager(
        TxConfig(cleanup_interval_s=0, snapshot_interval_s=0),
        TransactionStateStore(LocalDirStorage(data_dir)),
    )
    manager.start()
    key_of = [f"key-{i}".encode().ljust(16, b".") for i in range(threads)]

    def cycle(i: int) -> int:
        tx = manager.start_short()
        manager.can_commit(tx.transaction_id, [key_of[i]])
        manager.commit(tx.transaction_id, tx.write_pointer)
        return 1

    run = run_threads(threads, seconds, cycle, latencies=True)
    stats = manager.log.stats  # the benchmark reports group-commit batching
    manager.stop()
    result = _summary(run.items, run.seconds, run.latencies)
    if stats.syncs:
        result["edits_per_fsync"] = round(stats.edits / stats.syncs, 2)
    return result


def _line(r: dict[str, Any]) -> str:
    return f"{r['per_second']:>9.0f} /s  p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms"


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, for smoke tests")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "txn.json")
    parser.add_argument(
        "--engine",
        choices=("auto", "native", "python"),
        default="auto",
        help="the engine of every section but 'engines', which compares both (txn.engine)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the 'engines' section")
    parser.add_argument(
        "--server-config",
        type=Path,
        help="TOML for txn serve, e.g. [server] sync_helper = false (see docs/txn.md)",
    )
    args = parser.parse_args(argv)
    os.environ["TXN_ENGINE"] = args.engine  # the servers this benchmark starts read it
    engine.set_default(args.engine)
    seconds = args.seconds or (1.5 if args.quick else 6.0)
    concurrency = [1, 4, 16]
    report: dict[str, Any] = new_report(
        "txn",
        seconds_per_point=seconds,
        in_process={},
        thrift={},
        thrift_lean_client={},
        rpc_floor_status={},
        rpc_floor_status_lean_client={},
        rpc_floor_thriftpy2_echo={},
        saturation_async_lean={},
        saturation_async_lean_in_memory={},
        disk_floor={},
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        for n in concurrency:
            report["in_process"][str(n)] = r = _in_process(root / f"inproc-{n}", n, seconds)
            print(f"in-process  {n:>2} threads: {_line(r)}", flush=True)

        server, address = _start_txn_server(root / "served", args.server_config)
        try:
            for section, kind, label in (
                ("thrift", "cycle", "thrift     "),
                ("thrift_lean_client", "lean-cycle", "thrift lean"),
                ("rpc_floor_status", "status", "status()   "),
                ("rpc_floor_status_lean_client", "lean-status", "status lean"),
            ):
                for n in concurrency:
                    report[section][str(n)] = r = _drive_clients(kind, address, n, seconds)
                    print(f"{label} {n:>2} clients: {_line(r)}", flush=True)
            _saturation(report["saturation_async_lean"], "async lean", server, address, seconds)
        finally:
            server.terminate()

        server, address = _start_txn_server(None, args.server_config)
        try:
            section = report["saturation_async_lean_in_memory"]
            _saturation(section, "in memory ", server, address, seconds)
        finally:
            server.terminate()

        java_sections(report, root, seconds, lambda d: _start_txn_server(d, args.server_config))

        for n in (1, 4):
            report["disk_floor"][str(n)] = r = _disk_floor(root, n, seconds)
            print(f"disk floor  {n:>2} threads: {r}", flush=True)
        report["group_commit_bound"] = group_commit_bound(root, seconds)
        rounds = 1 if args.quick else args.rounds
        report["engines"] = compare_engines(root, rounds, min(seconds, 4.0))

        ctx = mp.get_context("fork")
        port_q = ctx.Queue()
        echo_proc = ctx.Process(target=_echo_server_main, args=(port_q,), daemon=True)
        echo_proc.start()
        echo_address = ("127.0.0.1", port_q.get(timeout=30))
        try:
            for n in concurrency:
                r = _drive_clients("echo", echo_address, n, seconds)
                report["rpc_floor_thriftpy2_echo"][str(n)] = r
                print(f"echo        {n:>2} clients: {_line(r)}", flush=True)
        finally:
            echo_proc.terminate()
            echo_proc.join(10)

    for section, floor_section in (
        ("thrift", "rpc_floor_status"),
        ("thrift_lean_client", "rpc_floor_status_lean_client"),
    ):
        for n in concurrency:
            cycles = report[section][str(n)]["per_second"]
            floor = report[floor_section][str(n)]["per_second"] / 3
            report[section][str(n)]["fraction_of_rpc_floor"] = round(cycles / floor, 3)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
