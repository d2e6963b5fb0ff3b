"""``tms queue …``: create a queue, enqueue, receive, ack, nack, stats (docs/queues.md).

::

    tms queue create NS QUEUE [--lease 30s] [--max-attempts N] [--backoff 1s]
                              [--dead-letter-queue QUEUE] ...
    tms queue enqueue NS QUEUE [MESSAGE ...] [--key K] [--delay 5m | --at T] [--priority N]
    tms queue receive NS QUEUE [--max N] [--lease 30s] [--wait 0]
    tms queue ack NS QUEUE RECEIPT ...
    tms queue nack NS QUEUE RECEIPT ... [--delay 10s]
    tms queue stats NS QUEUE

``enqueue`` without messages enqueues one per line of stdin; ``receive`` prints each
message with its *receipt* (``<id>.<attempt>``), which ``ack`` and ``nack`` take.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId
from tms.queues import AckOutcome, EnqueueItem, Receipt
from txn.clikit import (
    Column,
    add_output_options,
    add_payload_option,
    emit,
    emit_object,
    parse_duration,
    parse_time,
    said,
)

__all__ = ["register"]

MESSAGE_COLUMNS = (
    Column("RECEIPT", "receipt"),
    Column("ATTEMPT", "attempt", "int"),
    Column("DUE", "due", "time"),
    Column("LEASE UNTIL", "leaseExpires", "time"),
    Column("KEY", "key"),
    Column("PAYLOAD", "payload", "payload"),
)
STATS_FIELDS = (
    Column("queue", "queue"),
    Column("ready", "ready", "int"),
    Column("leased", "leased", "int"),
    Column("scheduled", "scheduled", "int"),
    Column("pending", "pending", "int"),
    Column("dead", "dead", "int"),
    Column("acked", "acked", "int"),
    Column("oldest ready", "oldestReadyTime", "time"),
)


def _duration_or_zero(text: str) -> int:
    """``parse_duration``, and 0 (now, or no wait)."""
    return 0 if text.strip() in ("0", "0s") else parse_duration(text)


def _queue(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("namespace", help="namespace ([A-Za-z0-9_]+)")
    cmd.add_argument("queue", help="queue: a topic of kind queue ([A-Za-z0-9_-]+)")


def register(commands: Any) -> None:
    group = commands.add_parser(
        "queue", help="work queues: create, enqueue, receive, ack, nack, stats"
    )
    queue = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = queue.add_parser("create", help="create a queue (a topic with kind=queue)")
    _queue(create)
    for flag, prop, text in (
        ("--lease", "lease_s", "how long a receive leases a message (default 30s)"),
        ("--backoff", "backoff_s", "back-off after the first failed attempt (default 1s)"),
        ("--max-backoff", "max_backoff_s", "longest back-off (default 1h)"),
        ("--purge-after", "purge_after_s", "how long acked messages are kept (default 1d)"),
    ):
        create.add_argument(flag, type=parse_duration, dest=prop, help=text)
    create.add_argument(
        "--max-attempts",
        type=int,
        dest="max_attempts",
        help="deliveries before a message is dead-lettered (default 10; 0: never)",
    )
    create.add_argument(
        "--dead-letter-queue",
        dest="dead_letter_queue",
        metavar="QUEUE",
        help="a queue of the namespace that dead messages move to (default: they stay)",
    )
    create.set_defaults(handler=_create)

    enqueue = queue.add_parser("enqueue", help="enqueue messages (none given: stdin lines)")
    _queue(enqueue)
    enqueue.add_argument("messages", nargs="*", metavar="MESSAGE", help="payloads (UTF-8)")
    enqueue.add_argument(
        "--key", help="an application key: enqueueing it again is idempotent (one message)"
    )
    when = enqueue.add_mutually_exclusive_group()
    when.add_argument("--delay", type=parse_duration, help="deliver after this long (e.g. 5m)")
    when.add_argument("--at", type=parse_time, help="deliver not before (ms or ISO-8601)")
    enqueue.add_argument("--priority", type=int, default=0, help="lower first (default 0)")
    enqueue.set_defaults(handler=_enqueue)

    receive = queue.add_parser("receive", help="lease due messages and print them")
    _queue(receive)
    receive.add_argument("--max", type=int, default=1, help="at most this many (default 1)")
    receive.add_argument(
        "--lease", type=parse_duration, help="lease them this long (default: the queue's)"
    )
    receive.add_argument(
        "--wait", type=_duration_or_zero, default=0, help="wait this long for one (default 0)"
    )
    add_output_options(receive)
    add_payload_option(receive)
    receive.set_defaults(handler=_receive)

    for name, text in (("ack", "finish deliveries"), ("nack", "return deliveries")):
        cmd = queue.add_parser(name, help=text)
        _queue(cmd)
        cmd.add_argument("receipts", nargs="+", metavar="RECEIPT", help="as receive printed")
        if name == "nack":
            cmd.add_argument(
                "--delay",
                type=_duration_or_zero,
                help="due again after this, 0 at once (default: the queue's back-off)",
            )
        cmd.set_defaults(handler=_ack if name == "ack" else _nack)

    stats = queue.add_parser("stats", help="messages per state and the oldest ready one")
    _queue(stats)
    add_output_options(stats)
    stats.set_defaults(handler=_stats)


def _topic(args: argparse.Namespace) -> TopicId:
    return TopicId(args.namespace, args.queue)


def _create(args: argparse.Namespace, client: Any) -> int:
    props = {"kind": "queue"}
    for name in (
        "lease_s", "backoff_s", "max_backoff_s", "purge_after_s", "max_attempts",
        "dead_letter_queue",
    ):  # fmt: skip
        value = getattr(args, name)
        if value is not None:
            props[name] = str(value)
    client.create_topic(_topic(args), props)
    said(f"created queue {_topic(args)}")
    return 0


def _enqueue(args: argparse.Namespace, client: Any) -> int:
    payloads = args.messages or [line.rstrip("\n") for line in sys.stdin]
    if args.key is not None and len(payloads) != 1:
        raise TmsInvalidArgumentError("--key names one message")
    items = [
        EnqueueItem(
            p.encode(),
            key=args.key,
            delay_ms=(args.delay or 0) * 1000,
            at_ms=args.at,
            priority=args.priority,
        )
        for p in payloads
    ]
    results = client.queue(_topic(args)).enqueue(items)
    fresh = sum(not r.duplicate for r in results)
    duplicate = len(results) - fresh
    extra = f" ({duplicate} already there by key)" if duplicate else ""
    said(f"enqueued {fresh} message(s) to {_topic(args)}{extra}")
    return 0


def _receive(args: argparse.Namespace, client: Any) -> int:
    messages = client.queue(_topic(args)).receive(
        args.max, lease_s=args.lease, wait_s=float(args.wait)
    )
    records = [
        {
            "receipt": str(m.receipt),
            "id": m.id.hex(),
            "attempt": m.attempt,
            "due": m.due_ms,
            "leaseExpires": m.lease_expires_ms,
            "priority": m.priority,
            "key": m.key,
            "payload": m.payload,
        }
        for m in messages
    ]
    emit(args, records, MESSAGE_COLUMNS)
    return 0


def _finish(args: argparse.Namespace, outcomes: list[AckOutcome], verb: str) -> int:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.value] = counts.get(outcome.value, 0) + 1
    said(f"{verb} {len(outcomes)} receipt(s): " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    failed = AckOutcome.LEASE_LOST.value in counts or AckOutcome.UNKNOWN.value in counts
    return 1 if failed else 0


def _ack(args: argparse.Namespace, client: Any) -> int:
    receipts = [Receipt.parse(r) for r in args.receipts]
    return _finish(args, client.queue(_topic(args)).ack(receipts), "acked")


def _nack(args: argparse.Namespace, client: Any) -> int:
    receipts = [Receipt.parse(r) for r in args.receipts]
    delay = None if args.delay is None else float(args.delay)
    return _finish(args, client.queue(_topic(args)).nack(receipts, delay_s=delay), "returned")


def _stats(args: argparse.Namespace, client: Any) -> int:
    stats = client.queue(_topic(args)).stats()
    record = {
        "queue": str(_topic(args)),
        "ready": stats.ready,
        "leased": stats.leased,
        "scheduled": stats.scheduled,
        "pending": stats.pending,
        "dead": stats.dead,
        "acked": stats.acked,
        "oldestReadyTime": stats.oldest_ready_ms,
    }
    emit_object(args, record, STATS_FIELDS)
    return 0
