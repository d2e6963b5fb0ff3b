"""``tms publish``, ``tms tail`` and ``tms inspect``.

::

    tms publish NS TOPIC [MESSAGE ...]          (no messages: one per line of stdin)
    tms tail NS TOPIC [--from-start | --from-time T | --from-id HEX | --subscription NAME]
                      [--tx-server H:P] [--tx-tls-ca PEM [--tx-tls-cert PEM --tx-tls-key PEM]]
    tms inspect NS TOPIC [--start-ms T] [--end-ms T] [--limit N]
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from tms.errors import TmsInvalidArgumentError, TransactionServiceError
from tms.model import Message, TopicId
from tms.subscription import SubscriptionId
from txn.clikit import (
    Column,
    add_output_options,
    add_payload_option,
    add_progress_options,
    emit,
    format_bytes,
    format_rate,
    parse_time,
    progress,
    said,
)
from txn.errors import TxError
from txn.rpc.tls import add_client_tls_arguments, client_tls

__all__ = ["register", "start_position", "tx_client_for"]

MESSAGE_COLUMNS = (
    Column("PUBLISHED", "publishTime", "time"),
    Column("ID", "id"),
    Column("PAYLOAD", "payload", "payload"),
)
INSPECT_COLUMNS = (
    Column("TABLE", "table"),
    Column("GEN", "generation", "int"),
    Column("TIME", "time", "time"),
    Column("SEQ", "seq", "int"),
    Column("KIND", "kind"),
    Column("TX WRITE POINTER", "tx_write_pointer"),
    Column("BYTES", "payload_bytes", "int"),
    Column("NOTES", "notes"),
)


def _topic(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("namespace", help="namespace ([A-Za-z0-9_]+)")
    cmd.add_argument("topic", help="topic ([A-Za-z0-9_-]+)")


def add_start_options(
    cmd: argparse.ArgumentParser, *, default: str
) -> argparse._MutuallyExclusiveGroup:
    """Where a read starts: ``--from-start``, ``--from-time``, ``--from-id``."""
    where = cmd.add_mutually_exclusive_group()
    where.add_argument(
        "--from-start", action="store_true", help=f"from the oldest message (default: {default})"
    )
    where.add_argument(
        "--from-time",
        type=parse_time,
        metavar="TIME",
        help="from this publish time: ISO-8601 (local unless it has an offset or Z) or ms",
    )
    where.add_argument("--from-id", metavar="HEX", help="from this message id (inclusive)")
    return where


def add_tx_options(cmd: argparse.ArgumentParser) -> None:
    """``--tx-server`` and its TLS options: read transactionally."""
    cmd.add_argument(
        "--tx-server",
        metavar="HOST:PORT",
        help="read transactionally through this transaction server (committed messages "
        "only, stopping at the first uncommitted one)",
    )
    add_client_tls_arguments(cmd, "--tx-tls-")


def register(commands: Any) -> None:
    publish = commands.add_parser(
        "publish",
        help="publish messages (arguments, or one per line of stdin)",
        description="Publish messages non-transactionally. Without MESSAGE arguments, "
        "each line of stdin is a message, sent --batch at a time with a progress bar.",
    )
    _topic(publish)
    publish.add_argument("messages", nargs="*", metavar="MESSAGE", help="message payloads")
    publish.add_argument(
        "--batch", type=int, default=500, help="messages per request from stdin (500)"
    )
    add_progress_options(publish)
    publish.set_defaults(handler=_publish)

    tail = commands.add_parser(
        "tail",
        help="follow a topic, printing messages as they come",
        description="Follow a topic. With --subscription, read through the subscription: "
        "from its position, committing what was printed, so the next tail resumes where "
        "this one stopped (at least once: a message may show again after a crash).",
    )
    _topic(tail)
    add_start_options(tail, default="new messages only").add_argument(
        "--subscription", metavar="NAME", help="read through this subscription, resuming it"
    )
    add_tx_options(tail)
    add_output_options(tail)
    # The spelling before --output; kept so scripts written for it still run.
    tail.add_argument(
        "--format", dest="output", choices=("table", "text", "json"), help=argparse.SUPPRESS
    )
    add_payload_option(tail)
    tail.add_argument("--count", type=int, help="stop after this many messages")
    tail.set_defaults(handler=_tail)

    inspect = commands.add_parser(
        "inspect",
        help="raw rows of a topic's tables, consuming nothing (the table debugger; admin)",
    )
    _topic(inspect)
    inspect.add_argument(
        "--start-ms",
        type=parse_time,
        default=0,
        metavar="TIME",
        help="from this publish time (ISO-8601 or ms; default: the oldest)",
    )
    inspect.add_argument(
        "--end-ms", type=parse_time, metavar="TIME", help="before this publish time"
    )
    inspect.add_argument("--limit", type=int, default=1000, help="at most this many rows")
    add_output_options(inspect)
    inspect.add_argument(
        "--json", dest="output", action="store_const", const="json", help=argparse.SUPPRESS
    )
    inspect.set_defaults(handler=_inspect)


# -- publish ----------------------------------------------------------------------------


def _stdin_batches(batch: int) -> Iterator[list[bytes]]:
    current: list[bytes] = []
    for line in sys.stdin.buffer:
        current.append(line.rstrip(b"\r\n"))
        if len(current) >= batch:
            yield current
            current = []
    if current:
        yield current


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _publish(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    if args.messages:
        client.publish(topic, args.messages)
        said(f"published {_plural(len(args.messages), 'message')} to {topic}")
        return 0
    count = size = 0
    started = time.monotonic()
    with progress(args, desc=f"publish {topic}") as bar:
        for batch in _stdin_batches(max(1, args.batch)):
            client.publish(topic, batch)
            count += len(batch)
            size += sum(map(len, batch))
            bar.update(len(batch))
    elapsed = max(time.monotonic() - started, 1e-6)
    said(
        f"published {_plural(count, 'message')} ({format_bytes(size)}) to {topic} "
        f"in {elapsed:.1f} s ({format_rate(count / elapsed)})"
    )
    return 0


# -- tail -------------------------------------------------------------------------------


def start_position(args: argparse.Namespace, *, now_default: bool) -> bytes | str | int | None:
    """The read's start from ``add_start_options``: an id (hex), a time, or None for
    the oldest (or now, with ``now_default``, when none was given)."""
    if args.from_time is not None:
        return int(args.from_time)
    if args.from_id is not None:
        return str(args.from_id)
    if not args.from_start and now_default:
        return int(time.time() * 1000)  # from now on
    return None


def tx_client_for(args: argparse.Namespace) -> Any:
    """A Thrift client for ``--tx-server`` (None without): a few seconds of retrying
    (0.1 + 0.4 + 1.6 s), not the library's half minute."""
    if not args.tx_server:
        return None
    from txms_common.retry import RetryWithBackoff  # noqa: PLC0415
    from txn.rpc.client import ThriftTxClient  # noqa: PLC0415

    tls = client_tls(args.tx_tls_ca, args.tx_tls_cert, args.tx_tls_key)
    return ThriftTxClient(
        args.tx_server, tls=tls, timeout_s=5.0, retry=RetryWithBackoff(limit_s=2.0)
    )


def message_record(message: Any) -> dict[str, Any]:
    """A consumed message as the JSON of ``ConsumeResponse`` (payload base64)."""
    return {
        "id": message.id_hex,
        "publishTime": message.publish_ms,
        "payload": base64.b64encode(message.payload).decode(),
    }


def _tail(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    if args.output == "text":
        args.output = "table"
    start = start_position(args, now_default=True)
    client.get_topic(topic)  # an unreachable service or unknown topic: fail now, not follow
    if args.subscription:
        return _tail_subscription(args, client, SubscriptionId(topic, args.subscription))
    tx_client = tx_client_for(args)
    try:
        _print_until(args, client.follow(topic, start=start, tx_client=tx_client))
    finally:
        if tx_client is not None:
            tx_client.close()
    return 0


def _print_until(args: argparse.Namespace, messages: Iterable[Message]) -> Message | None:
    """Print ``messages`` until ``--count`` of them or Ctrl-C; the last one printed."""
    seen = 0
    last = None
    try:
        for message in messages:
            emit(args, [message_record(message)], MESSAGE_COLUMNS, stream=True)
            last, seen = message, seen + 1
            if args.count is not None and seen >= args.count:
                break
    except KeyboardInterrupt:
        pass
    except TxError as exc:
        raise TransactionServiceError(
            f"cannot use the transaction server at {args.tx_server}: {exc}"
        ) from exc
    return last


def _tail_subscription(args: argparse.Namespace, client: Any, sub: SubscriptionId) -> int:
    from tms.client.subscriber import Subscriber  # noqa: PLC0415

    info = client.get_subscription(sub)
    if info.preferences.transactional and not args.tx_server:
        raise TmsInvalidArgumentError(
            f"subscription {sub} reads committed messages only: give --tx-server"
        )
    tx_client = tx_client_for(args)
    subscriber = Subscriber(client, sub, tx_client=tx_client)
    last = None  # printed: processed (those before it, when the loop asked for the next)
    try:
        last = _print_until(args, subscriber)
    finally:
        try:
            subscriber.commit(through=last)  # what was printed, so the next tail goes on
            subscriber.close()
        finally:
            if tx_client is not None:
                tx_client.close()
    return 0


# -- inspect ----------------------------------------------------------------------------


def _inspect_record(row: dict[str, Any]) -> dict[str, Any]:
    notes = []
    if row.get("rolled_back"):
        notes.append("ROLLED BACK")
    if row.get("ttl_s") is not None:
        notes.append(f"ttl {row['ttl_s']}s")
    sealed = "seal" in row
    if sealed:
        notes.append(f"seal of marker {row['seal']['publish_ms']}/{row['seal']['seq']}")
    return {
        **row,
        "time": None if sealed else row.get("publish_ms", row.get("write_ms")),
        "kind": "seal" if sealed else row.get("kind", "payload"),
        "notes": " ".join(notes),
    }


def _inspect(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    report = client.inspect(topic, start_ms=args.start_ms, end_ms=args.end_ms, limit=args.limit)
    if args.output == "json":
        import json  # noqa: PLC0415

        print(json.dumps(report, indent=2))
        return 0
    state = "deleted" if report["deleted"] else "live"
    print(f"topic {topic}  generation {abs(report['generation'])} ({state})")
    emit(args, [_inspect_record(row) for row in report["rows"]], INSPECT_COLUMNS)
    if report["truncated"]:
        print(f"... (more rows; raise --limit above {args.limit})")
    return 0
