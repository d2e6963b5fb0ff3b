"""LevelDB's CPU for rows appended by one writer against several at once, under two
payload-key layouts. 100-byte values in synced batches of 1,000, round-robin over ``W``
write pointers as concurrent transactions (or a Spark job's concurrent tasks) write them;
each batch takes the next time (``ms``, as the topic's writer stamps a request), its rows
the sequences 0-999. The layouts:

* ``wp`` (today's payload table): ``<prefix><write pointer><ms><seq>``. Each write
  pointer appends at a point of its own: ``W`` writers, ``W`` append points.
* ``time`` (the prototype): ``<prefix><ms><seq>``, the topic's one append point whoever
  writes. Each batch begins with a *header* row at its first position (its write pointer
  and row count; in the real store it would be a request's), and once the pointer's rows
  are written (as at its commit marker) one *index* row ``<index prefix><write
  pointer>`` lists its batches' (ms, seq, count): what a marker's scan needs to find one
  pointer's rows (each batch's rows are contiguous, as one request's are under the
  topic's single writer). Until then the writer holds the ranges in memory; after a
  restart it would find them again from the header rows written since the pointer's
  transaction started.
* ``time-index``: the same, but an index row per batch, ``<index prefix><write
  pointer><ms><seq>`` -> count, in the batch's own write: a second append point, which is
  what costs (kept to show it).

After the writes it waits until LevelDB's background compactions are done, then reads
the rows of one write pointer back (what a transactional read of one commit marker does:
``wp`` one range, ``time`` the pointer's index rows and one range per batch). Prints, per
10^6 rows written, the process's CPU seconds (writes and compactions), of which LevelDB's
own background thread, the MB its compactions read and wrote, and per 10^6 rows read
back the CPU seconds of that read:

    python -m benchmarks.leveldb_interleave [--rows N] [--writers 1,2] [--layouts wp,time]
        [--buffer-mb 64] [--rounds R]

Each round runs every (layout, writers, buffer) case in turn, each in a fresh
interpreter and a fresh database, so the cases alternate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_PAYLOAD = os.urandom(50) + b"\x00" * 50
_PER_BATCH = 1000
_PREFIX = b"p/topic\x00\x00\x00\x00\x01"
_INDEX = b"i/topic\x00\x00\x00\x00\x01"
_WP_KEY = struct.Struct(">qqH")  # today: write pointer, ms, seq
_TIME_KEY = struct.Struct(">qH")  # the prototype: ms, seq
_INDEX_KEY = struct.Struct(">qqH")  # write pointer, ms, first seq
_COUNT = struct.Struct(">I")
_HEADER = struct.Struct(">qI")  # write pointer, rows after it
_RANGE = struct.Struct(">qHI")  # ms, first seq, rows
_LAYOUTS = ("wp", "time", "time-index")
_TICK = os.sysconf("SC_CLK_TCK")
_LEVEL = re.compile(rb"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_FIRST_WP = 1_000_000


def _cpu_by_thread() -> tuple[float, float]:
    """(this process's main thread, all its other threads) in CPU seconds."""
    main = other = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        if int(task.name) == os.getpid():
            main += cpu
        else:
            other += cpu
    return main, other


def _compactions(db: Any) -> tuple[float, float]:
    """(MB read, MB written) by LevelDB's compactions so far (``leveldb.stats``)."""
    read = written = 0.0
    for line in (db.get_property(b"leveldb.stats") or b"").splitlines():
        if m := _LEVEL.match(line):
            read += float(m.group(5))
            written += float(m.group(6))
    return read, written


def _write(db: Any, rows: int, writers: int, layout: str) -> None:
    ranges: dict[int, list[bytes]] = {}
    for n, first in enumerate(range(0, rows, _PER_BATCH)):
        wp = _FIRST_WP + n % writers
        ms = n  # each request a later time, as the topic's writer stamps it
        count = min(_PER_BATCH, rows - first)
        with db.write_batch(sync=True) as batch:
            if layout == "wp":
                for seq in range(count):
                    batch.put(_PREFIX + _WP_KEY.pack(wp, ms, seq), _PAYLOAD)
                continue
            if layout == "time":
                batch.put(_PREFIX + _TIME_KEY.pack(ms, 0), _HEADER.pack(wp, count))
                ranges.setdefault(wp, []).append(_RANGE.pack(ms, 1, count))
            else:
                batch.put(_INDEX + _INDEX_KEY.pack(wp, ms, 1), _COUNT.pack(count))
            for seq in range(1, count + 1):
                batch.put(_PREFIX + _TIME_KEY.pack(ms, seq), _PAYLOAD)
    with db.write_batch(sync=True) as batch:  # the pointers sealed
        for wp, kept in ranges.items():
            batch.put(_INDEX + struct.pack(">q", wp), b"".join(kept))


def _read_pointer(db: Any, layout: str, wp: int) -> int:
    """The rows of write pointer ``wp``, in order, as a marker's scan reads them."""
    seen = 0
    if layout == "wp":
        start = _PREFIX + struct.pack(">q", wp)
        for _key, _value in db.iterator(start=start, stop=_PREFIX + struct.pack(">q", wp + 1)):
            seen += 1
        return seen
    if layout == "time":
        index = db.get(_INDEX + struct.pack(">q", wp)) or b""
        spans = [_RANGE.unpack_from(index, at) for at in range(0, len(index), _RANGE.size)]
    else:
        start = _INDEX + struct.pack(">q", wp)
        spans = [
            (*_INDEX_KEY.unpack_from(key, len(_INDEX))[1:], _COUNT.unpack(value)[0])
            for key, value in db.iterator(start=start, stop=_INDEX + struct.pack(">q", wp + 1))
        ]
    for ms, seq, count in spans:
        lo = _PREFIX + _TIME_KEY.pack(ms, seq)
        hi = _PREFIX + _TIME_KEY.pack(ms, seq + count)
        for _key, _value in db.iterator(start=lo, stop=hi):
            seen += 1
    return seen


def one(rows: int, writers: int, buffer_mb: int, layout: str) -> dict[str, float]:
    """What writing ``rows`` cost this process, LevelDB settled; and reading one
    pointer's rows back."""
    import plyvel

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as path:
        db = plyvel.DB(
            path,
            create_if_missing=True,
            write_buffer_size=buffer_mb << 20,
            lru_cache_size=64 << 20,
            bloom_filter_bits=10,
        )
        main0, other0 = _cpu_by_thread()
        _write(db, rows, writers, layout)
        last = -1.0
        while True:  # until the compaction thread is idle for a second
            time.sleep(1.0)
            main1, other1 = _cpu_by_thread()
            if main1 + other1 - last < 0.02:
                break
            last = main1 + other1
        read_mb, written_mb = _compactions(db)
        started = time.process_time()
        seen = _read_pointer(db, layout, _FIRST_WP)
        read_cpu = time.process_time() - started
        db.close()
    expected = sum(
        min(_PER_BATCH, rows - first)
        for n, first in enumerate(range(0, rows, _PER_BATCH))
        if n % writers == 0
    )
    if seen != expected:
        raise AssertionError(f"read {seen} rows of the first pointer, wrote {expected}")
    per = 1e6 / rows
    return {
        "cpu": (main1 + other1 - main0 - other0) * per,
        "leveldb_thread": (other1 - other0) * per,
        "compaction_read_mb": read_mb * per,
        "compaction_write_mb": written_mb * per,
        "read_cpu": read_cpu * 1e6 / seen,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--writers", default="1,2")
    parser.add_argument(
        "--layouts", default="wp,time", help="payload key layouts: " + ", ".join(_LAYOUTS)
    )
    parser.add_argument("--buffer-mb", default="64", help="write buffer sizes, e.g. 64,256")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        rows, writers, buffer_mb, layout = args.one
        print(json.dumps(one(int(rows), int(writers), int(buffer_mb), layout)))
        return 0
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    if not set(layouts) <= set(_LAYOUTS):
        parser.error(f"unknown layout in {args.layouts!r}")
    cases = [
        (layout, int(w), int(b))
        for b in args.buffer_mb.split(",")
        for w in args.writers.split(",")
        for layout in layouts
    ]
    for r in range(args.rounds):
        for layout, writers, buffer_mb in cases:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.leveldb_interleave",
                    "--one",
                    str(args.rows),
                    str(writers),
                    str(buffer_mb),
                    layout,
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            f = json.loads(out)
            print(
                f"round {r}: layout {layout}, {writers} writer(s), write buffer {buffer_mb} MB, "
                f"per 10^6 rows: {f['cpu']:.2f} CPU-s (LevelDB's thread "
                f"{f['leveldb_thread']:.2f}), compactions read {f['compaction_read_mb']:.0f} / "
                f"written {f['compaction_write_mb']:.0f} MB; reading one pointer back "
                f"{f['read_cpu']:.2f} CPU-s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
