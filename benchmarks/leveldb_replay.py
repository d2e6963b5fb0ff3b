"""What a larger LevelDB write buffer costs at start after a crash: a child process fills
a fresh ``LevelDBStore`` with unsynced writes (100-byte values, batches of 1,000) up to
just under the buffer, syncs one last write and exits without closing (as after
``kill -9``); another opens the store, which replays LevelDB's log, and prints the open's
wall and CPU seconds and the log's size:

    python -m benchmarks.leveldb_replay [--buffer-mb 64,256] [--rounds R]

Each round runs every buffer size in turn, each in fresh interpreters and a fresh store.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tms.store.leveldb import LevelDBStore


def fill(path: str, buffer_mb: int) -> None:
    """Unsynced writes up to just under the buffer, one synced write, then exit unclosed."""
    store = LevelDBStore(path, write_buffer_bytes=buffer_mb << 20)
    value = os.urandom(100)
    rows = (buffer_mb - 4) * (1 << 20) // 130  # LevelDB counts ~30 bytes per entry more
    for start in range(0, rows, 1000):
        ops = [(b"p", i.to_bytes(8, "big"), value) for i in range(start, min(rows, start + 1000))]
        store.write(ops, sync=False)
    store.write([(b"p", b"last", value)], sync=True)
    os._exit(0)


def reopen(path: str, buffer_mb: int) -> str:
    """Open (replaying the log) and describe what it took."""
    log_mb = sum(f.stat().st_size for f in Path(path).glob("*.log")) / (1 << 20)
    wall, cpu = time.monotonic(), time.process_time()
    store = LevelDBStore(path, write_buffer_bytes=buffer_mb << 20)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    store.close()
    return (
        f"{buffer_mb} MB buffer: {log_mb:.0f} MB of log replayed in {wall:.2f} s, {cpu:.2f} CPU-s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffer-mb", default="64,256")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # fill|open PATH MB
    args = parser.parse_args(argv)
    if args.child:
        what, path, mb = args.child
        if what == "fill":
            fill(path, int(mb))
        print(reopen(path, int(mb)), flush=True)
        return 0
    for _ in range(args.rounds):
        for mb in (int(m) for m in args.buffer_mb.split(",")):
            with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
                for what in ("fill", "open"):
                    subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "benchmarks.leveldb_replay",
                            "--child",
                            what,
                            tmp,
                            str(mb),
                        ],
                        check=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
