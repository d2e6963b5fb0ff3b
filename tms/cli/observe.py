"""``tms top`` and ``tms metrics``: the service at a glance in a terminal.

::

    tms top NS [--interval S] [--iterations N] [--sort rate|messages|bytes|name]
    tms metrics [--match TEXT] [--buckets]

``top`` redraws a table of the namespace's topics every ``--interval`` seconds: stored
messages and bytes, the publish rate over the last minute (``RATE 1m``) and since the
previous frame (``NOW``), the last publish time with its age, and how many subscriptions
the topic has with the largest of their lags (``MAX LAG``). On a terminal it
clears the screen for each frame; otherwise frames follow each other, separated by a
blank line. ``--iterations N`` stops after N frames (``--once``: one).

``metrics`` shows every sample ``/metrics`` exports (it needs the metrics grant) as a
table or JSON: Prometheus' own names and labels.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from txn.clikit import (
    Column,
    Style,
    add_output_options,
    emit,
    format_rate,
    format_time,
    table_lines,
)

__all__ = ["register", "top_frame"]

_CLEAR = "\x1b[H\x1b[2J"
_TOP_COLUMNS = (
    Column("TOPIC", "topic"),
    Column("MESSAGES", "messages", "int"),
    Column("BYTES", "payloadBytes", "bytes"),
    Column("RATE 1m", "publishRate", "rate"),
    Column("NOW", "now", "rate"),
    Column("LAST PUBLISH", "lastPublishTime", "time"),
    Column("AGO", "ago", "duration"),
    Column("SUBS", "subscriptions", "int"),
    Column("MAX LAG", "maxLag", "int"),
)
_SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "rate": lambda r: (-(r.get("publishRate") or 0), r["topic"]),
    "messages": lambda r: (-(r.get("messages") or 0), r["topic"]),
    "bytes": lambda r: (-(r.get("payloadBytes") or 0), r["topic"]),
    "name": lambda r: r["topic"],
}


def register(commands: Any) -> None:
    top = commands.add_parser(
        "top", help="a live view of a namespace's topics: rates, sizes, last publish, lag"
    )
    top.add_argument("namespace", help="namespace ([A-Za-z0-9_]+)")
    top.add_argument(
        "--interval", type=float, default=2.0, help="seconds between frames (default 2)"
    )
    top.add_argument(
        "--iterations", type=int, help="stop after this many frames (default: until Ctrl-C)"
    )
    top.add_argument(
        "--once", dest="iterations", action="store_const", const=1, help="one frame, then exit"
    )
    top.add_argument(
        "--sort", choices=tuple(_SORTS), default="rate", help="row order (default rate)"
    )
    top.add_argument("--utc", action="store_true", help="show times in UTC")
    top.set_defaults(handler=_top)

    metrics = commands.add_parser(
        "metrics", help="every metric the service exports (needs the metrics grant)"
    )
    metrics.add_argument("--match", help="only samples whose name contains this text")
    metrics.add_argument(
        "--buckets", action="store_true", help="include histogram buckets (left out by default)"
    )
    add_output_options(metrics, times=False)
    metrics.set_defaults(handler=_metrics)


def top_frame(
    namespace: str,
    url: str,
    stats: list[dict[str, Any]],
    previous: dict[str, tuple[int, float]],
    now_s: float,
    *,
    sort: str = "rate",
    utc: bool = False,
) -> list[str]:
    """One frame's lines. ``previous`` maps a topic to (messages, time) of the last
    frame and is updated (the NOW column is the rate between the two)."""
    rows = []
    for record in stats:
        row = dict(record)
        name = row["topic"]
        last = row.get("lastPublishTime")
        row["ago"] = max(0, round(now_s - last / 1000)) if last is not None else None
        before = previous.get(name)
        if before is not None and now_s > before[1]:
            row["now"] = max(0.0, (row["messages"] - before[0]) / (now_s - before[1]))
        previous[name] = (int(row["messages"]), now_s)
        rows.append(row)
    rows.sort(key=_SORTS[sort])
    total_rate = sum(r.get("publishRate") or 0 for r in rows)
    total = sum(r.get("messages") or 0 for r in rows)
    head = [
        f"tms top  {namespace} at {url}  {format_time(round(now_s * 1000), utc=utc)}",
        f"{len(rows)} topics, {total:,} messages, {format_rate(total_rate)} published "
        "over the last minute",
        "",
    ]
    body = table_lines(rows, _TOP_COLUMNS, Style(utc=utc), header=True)
    return head + (body if rows else ["(no topics)"])


def _top(args: argparse.Namespace, client: Any) -> int:
    previous: dict[str, tuple[int, float]] = {}
    tty = sys.stdout.isatty()
    frame = 0
    try:
        while args.iterations is None or frame < args.iterations:
            if frame:
                time.sleep(max(0.1, args.interval))
            stats = client.namespace_stats(args.namespace)
            lines = top_frame(
                args.namespace, args.url, stats, previous, time.time(), sort=args.sort, utc=args.utc
            )
            if tty:
                sys.stdout.write(_CLEAR)
            elif frame:
                sys.stdout.write("\n")
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
            frame += 1
    except KeyboardInterrupt:
        pass
    return 0


def _metrics(args: argparse.Namespace, client: Any) -> int:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    records = []
    for family in text_string_to_metric_families(client.metrics_text()):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created"):
                continue  # when each series began: noise here
            if name.endswith("_bucket") and not args.buckets:
                continue
            if args.match and args.match not in name:
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            records.append({"name": name, "labels": labels, "value": sample.value})
    emit(
        args,
        records,
        (Column("METRIC", "name"), Column("LABELS", "labels"), Column("VALUE", "value")),
    )
    return 0
