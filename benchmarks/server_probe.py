"""The standalone stack under a probe: what the messaging server does while a workload
runs, read from inside its process.

Run as ``python -m benchmarks.server_probe <tms.standalone arguments>`` with
``TXMS_PROBE_DIR`` set (``tms.standalone.Launched(..., module=MODULE)`` does this for a
benchmark). A thread in the server answers each file ``req-N`` that appears in that
directory with ``snap-N.json``: a snapshot of

* ``threads``: CPU seconds per thread (``/proc/self/task``), by Python thread name, or
  ``native:<comm>`` for threads Python did not start (LevelDB's compaction thread);
* ``leveldb``: per level, LevelDB's own compaction counters (``leveldb.stats``: files,
  size, compaction seconds, MB read and written), and the files at level 0;
* ``http``: connections accepted, requests per route, request bodies read (count, bytes,
  and a histogram by size), and the largest number of requests in flight at once.

``Probe.delta(before, after)`` subtracts two snapshots. With ``TXMS_PROBE_PROFILE=FILE``
every thread also runs under cProfile, merged into ``FILE`` at each snapshot (cProfile
counts wall time in waiting threads: read the shares of the busy ones).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import re
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["MODULE", "Probe", "merge_profiles", "profile_threads"]

MODULE = "benchmarks.server_probe"
_TICK = os.sysconf("SC_CLK_TCK")
_LEVEL = re.compile(rb"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


class _Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections = 0
        self.requests: dict[str, int] = {}
        self.bodies = 0
        self.body_bytes = 0
        self.sizes: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0


_C = _Counters()
_STORES: list[Any] = []
_PROFILES: list[cProfile.Profile] = []


def _size_bucket(n: int) -> str:
    bound = 1024
    while n > bound and bound < 1 << 30:
        bound *= 4
    return f"<= {bound}"


def _install() -> None:
    from aiohttp import web_protocol

    from tms.http.app import Api
    from tms.store.leveldb.db import LevelDBStore

    init = LevelDBStore.__init__

    def recorded(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _STORES.append(self)

    LevelDBStore.__init__ = recorded  # type: ignore[method-assign]

    made = web_protocol.RequestHandler.connection_made

    def counted(self: Any, transport: Any) -> None:
        with _C.lock:
            _C.connections += 1
        made(self, transport)

    web_protocol.RequestHandler.connection_made = counted  # type: ignore[method-assign]

    handle = web_protocol.RequestHandler._handle_request

    async def timed(self: Any, request: Any, start_time: float, *args: Any) -> Any:
        route = f"{request.method} {request.path.split('/')[-1] or request.path}"
        with _C.lock:
            _C.requests[route] = _C.requests.get(route, 0) + 1
            _C.in_flight += 1
            _C.max_in_flight = max(_C.max_in_flight, _C.in_flight)
        try:
            return await handle(self, request, start_time, *args)
        finally:
            with _C.lock:
                _C.in_flight -= 1

    web_protocol.RequestHandler._handle_request = timed  # type: ignore[method-assign,assignment]

    body = Api._body

    async def sized(self: Any, request: Any) -> bytes:
        data: bytes = await body(self, request)
        with _C.lock:
            _C.bodies += 1
            _C.body_bytes += len(data)
            key = _size_bucket(len(data))
            _C.sizes[key] = _C.sizes.get(key, 0) + 1
        return data

    Api._body = sized  # type: ignore[method-assign]


def _threads() -> dict[str, float]:
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        tid = int(task.name)
        name = names.get(tid)
        if name is None:
            name = "main" if tid == os.getpid() else f"native:{comm}"
        name = re.sub(r"[-_]\d+(\s.*)?$", "", name)  # pool threads together
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
    return out


def _leveldb() -> dict[str, Any]:
    levels: dict[str, list[float]] = {}
    level0 = 0
    for store in _STORES:
        try:
            db = store.db
            stats = db.get_property(b"leveldb.stats") or b""
            level0 += int(db.get_property(b"leveldb.num-files-at-level0") or 0)
        except Exception:  # closed or reopening
            continue
        for line in stats.splitlines():
            if m := _LEVEL.match(line):
                sums = levels.setdefault(m.group(1).decode(), [0.0] * 5)
                for i in range(5):
                    sums[i] += float(m.group(i + 2))
    keys = ("files", "size_mb", "compaction_s", "read_mb", "write_mb")
    return {
        "levels": {lv: dict(zip(keys, v, strict=True)) for lv, v in levels.items()},
        "compaction_s": sum(v[2] for v in levels.values()),
        "compaction_read_mb": sum(v[3] for v in levels.values()),
        "compaction_write_mb": sum(v[4] for v in levels.values()),
        "level0_files": level0,
    }


def _snapshot() -> dict[str, Any]:
    with _C.lock:
        http = {
            "connections": _C.connections,
            "requests": dict(_C.requests),
            "bodies": _C.bodies,
            "body_bytes": _C.body_bytes,
            "body_sizes": dict(_C.sizes),
            "max_in_flight": _C.max_in_flight,
        }
        _C.max_in_flight = _C.in_flight
    return {"time": time.time(), "threads": _threads(), "leveldb": _leveldb(), "http": http}


def merge_profiles(profiles: list[cProfile.Profile], out: str) -> None:
    """The statistics of ``profiles`` merged into the file ``out``."""
    merged: pstats.Stats | None = None
    for profile in list(profiles):
        try:
            stats = pstats.Stats(profile)
        except TypeError:  # a thread that ran nothing yet
            continue
        if merged is None:
            merged = stats
        else:
            merged.add(stats)
    if merged is not None:
        merged.dump_stats(out)


def _answer(directory: Path, profile: str | None) -> None:
    done: set[str] = set()
    while True:
        for req in directory.glob("req-*"):
            if req.name in done:
                continue
            done.add(req.name)
            if profile:
                merge_profiles(_PROFILES, profile)
            snap = directory / f"snap-{req.name[4:]}.json"
            tmp = snap.with_suffix(".tmp")
            tmp.write_text(json.dumps(_snapshot()))
            tmp.rename(snap)
        time.sleep(0.05)


def profile_threads(profiles: list[cProfile.Profile]) -> None:
    """Every thread started from now on runs under a cProfile of its own, added to
    ``profiles``."""
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]


class Probe:
    """The benchmark's side: ask a server started with ``TXMS_PROBE_DIR=directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._n = 0

    def snapshot(self, timeout_s: float = 30.0) -> dict[str, Any]:
        self._n += 1
        (self.directory / f"req-{self._n}").touch()
        snap = self.directory / f"snap-{self._n}.json"
        deadline = time.monotonic() + timeout_s
        while not snap.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the server's probe did not answer")
            time.sleep(0.05)
        result: dict[str, Any] = json.loads(snap.read_text())
        return result

    @staticmethod
    def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        def sub(a: Any, b: Any) -> Any:
            if isinstance(b, dict):
                return {k: sub(a.get(k, 0) if isinstance(a, dict) else 0, v) for k, v in b.items()}
            return round(b - a, 3) if isinstance(b, int | float) else b

        out: dict[str, Any] = sub(before, after)
        out["http"]["max_in_flight"] = after["http"]["max_in_flight"]
        out["leveldb"]["level0_files"] = after["leveldb"]["level0_files"]
        return out


def main() -> None:
    directory = Path(os.environ["TXMS_PROBE_DIR"])
    profile = os.environ.get("TXMS_PROBE_PROFILE")
    _install()
    if profile:
        profile_threads(_PROFILES)
    threading.Thread(target=_answer, args=(directory, profile), name="probe", daemon=True).start()
    sys.argv = ["tms.standalone", *sys.argv[1:]]
    runpy.run_module("tms.standalone", run_name="__main__")


if __name__ == "__main__":
    main()
