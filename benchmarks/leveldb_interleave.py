"""LevelDB's CPU for rows appended by one writer against several at once, each at its
own append point: payload-table keys (``<prefix><write pointer><ms><seq>``) of 100-byte
values, in synced batches of 1,000, round-robin over ``W`` write pointers as concurrent
transactions (or a Spark job's concurrent tasks) write them. Then waits until LevelDB's
background compactions are done and prints the process's CPU seconds (the writes and the
compactions) per 10^6 rows:

    python -m benchmarks.leveldb_interleave [--rows N] [--writers 1,2] [--buffer-mb 64]
        [--rounds R]

Each round runs every (writers, buffer) case in turn, each in a fresh interpreter and a
fresh database, so the cases alternate.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time

_PAYLOAD = os.urandom(50) + b"\x00" * 50
_PER_BATCH = 1000


def one(rows: int, writers: int, buffer_mb: int) -> float:
    """CPU seconds of this process to write ``rows`` and let LevelDB settle."""
    import plyvel

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as path:
        db = plyvel.DB(
            path,
            create_if_missing=True,
            write_buffer_size=buffer_mb << 20,
            lru_cache_size=64 << 20,
            bloom_filter_bits=10,
        )
        started = sum(os.times()[:2])
        for first in range(0, rows, _PER_BATCH):
            wp = 1_000_000 + (first // _PER_BATCH) % writers
            with db.write_batch(sync=True) as batch:
                for i in range(first, min(first + _PER_BATCH, rows)):
                    key = b"p/topic\x00" + struct.pack(">qqi", wp, i // 1000, i % 1000)
                    batch.put(key, _PAYLOAD)
        last = -1.0
        while True:  # until the compaction thread is idle for a second
            time.sleep(1.0)
            cpu = sum(os.times()[:2])
            if cpu - last < 0.02:
                break
            last = cpu
        db.close()
    return cpu - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--writers", default="1,2")
    parser.add_argument("--buffer-mb", default="64", help="write buffer sizes, e.g. 64,256")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(one(*args.one))
        return 0
    cases = [(int(w), int(b)) for b in args.buffer_mb.split(",") for w in args.writers.split(",")]
    for r in range(args.rounds):
        for writers, buffer_mb in cases:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.leveldb_interleave",
                    "--one",
                    str(args.rows),
                    str(writers),
                    str(buffer_mb),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            cpu = float(out.strip())
            print(
                f"round {r}: {writers} writer(s), write buffer {buffer_mb} MB: "
                f"{cpu * 1e6 / args.rows:.2f} CPU-s per 10^6 rows",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
