"""``tms export`` and ``tms import``: a topic to and from a file.

::

    tms export NS TOPIC FILE [--format jsonl|avro] [--from-start | --from-time T |
                             --from-id HEX] [--until T] [--limit N] [--tx-server H:P]
    tms import NS TOPIC FILE [--format jsonl|avro] [--batch N]

Formats (``FILE`` ``-`` is stdout / stdin, JSON lines only):

* **JSON lines** (``.jsonl``, ``.ndjson``, ``.json``): one object per message,
  ``{"id": "<40 hex>", "publishTime": ms, "payload": "<base64>"}``; import reads
  ``payload`` and ignores the rest.
* **Avro object container file** (``.avro``, deflate): records of ``MESSAGE_SCHEMA``
  (``id`` fixed 20 bytes, ``publishTime`` timestamp-millis, ``payload`` bytes), the
  topic in the file's metadata (``txms.topic``), readable by Spark, Hive, DuckDB, etc.

An export reads the topic once from the start position to what is there when it gets
there (a transactional export, with ``--tx-server``, stops at the first uncommitted
message). An import publishes the payloads in the file's order, non-transactionally, in
batches: it keeps the **order and the payloads**, not the ids or publish times (a
publish assigns new ones). A file is checked whole before anything is published; if
publishing fails part-way, the error says how many messages went in.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tms.cli.messages import (
    add_start_options,
    add_tx_options,
    start_position,
    tx_client_for,
)
from tms.errors import TmsError, TmsInvalidArgumentError
from tms.model import TopicId
from txn.clikit import add_progress_options, format_bytes, format_rate, parse_time, progress, said

__all__ = ["MESSAGE_SCHEMA", "register"]

MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Message",
    "namespace": "txms",
    "doc": "A message of a txms topic, as tms export writes it.",
    "fields": [
        {"name": "id", "type": {"type": "fixed", "name": "MessageId", "size": 20}},
        {"name": "publishTime", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "payload", "type": "bytes"},
    ],
}
_SUFFIXES = {".avro": "avro", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


def register(commands: Any) -> None:
    export = commands.add_parser(
        "export",
        help="write a topic's messages to a file (JSON lines or Avro)",
        description="Write a topic's messages, oldest first, to a JSON lines or Avro "
        "object container file, with progress.",
    )
    _common(export, "file to write ('-': stdout, JSON lines)")
    add_start_options(export, default="the oldest")
    export.add_argument(
        "--until",
        type=parse_time,
        metavar="TIME",
        help="only messages published before this time (ISO-8601 or ms)",
    )
    export.add_argument("--limit", type=int, help="at most this many messages")
    add_tx_options(export)
    export.set_defaults(handler=_export)

    imp = commands.add_parser(
        "import",
        help="publish the messages of a file (JSON lines or Avro) to a topic",
        description="Publish every message of a file, in its order, with progress. Order "
        "and payloads are kept; ids and publish times are new.",
    )
    _common(imp, "file to read ('-': stdin, JSON lines)")
    imp.add_argument("--batch", type=int, default=500, help="messages per request (500)")
    imp.set_defaults(handler=_import)


def _common(cmd: argparse.ArgumentParser, file_help: str) -> None:
    cmd.add_argument("namespace", help="namespace ([A-Za-z0-9_]+)")
    cmd.add_argument("topic", help="topic ([A-Za-z0-9_-]+)")
    cmd.add_argument("file", help=file_help)
    cmd.add_argument(
        "--format",
        choices=("jsonl", "avro"),
        help="jsonl or avro (default: from the file's suffix, else jsonl)",
    )
    add_progress_options(cmd)


def _format_of(args: argparse.Namespace) -> str:
    fmt: str = args.format or _SUFFIXES.get(Path(args.file).suffix.lower(), "jsonl")
    if fmt == "avro" and args.file == "-":
        raise TmsInvalidArgumentError("Avro needs a file, not '-'")
    return fmt


# -- export -----------------------------------------------------------------------------


def _messages(client: Any, topic: TopicId, args: argparse.Namespace, tx: Any) -> Iterator[Any]:
    """The topic's messages from the start position to what is there now."""
    position = start_position(args, now_default=False)
    inclusive = True
    left = args.limit
    while left is None or left > 0:
        batch = 1000 if left is None else min(1000, left)
        transaction = tx.start_short() if tx is not None else None
        try:
            result = client.poll(
                topic, start=position, inclusive=inclusive, limit=batch, transaction=transaction
            )
        finally:
            if transaction is not None:
                tx.abort(transaction)
        for message in result.messages:
            if args.until is not None and message.publish_ms >= args.until:
                return
            yield message
        if left is not None:
            left -= len(result.messages)
        if not result.messages or result.held:
            return
        position, inclusive = result.messages[-1].id_bytes, False


def _export(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    fmt = _format_of(args)
    total = None
    with contextlib.suppress(TmsError):  # the bar's total is a nicety, an estimate
        total = int(client.topic_stats(topic)["messages"])
    if args.limit is not None:
        total = args.limit if total is None else min(total, args.limit)
    tx = tx_client_for(args)
    count = size = 0
    started = time.monotonic()

    def counted(bar: Any) -> Iterator[Any]:
        nonlocal count, size
        for message in _messages(client, topic, args, tx):
            count += 1
            size += len(message.payload)
            bar.update(1)
            yield message

    try:
        client.get_topic(topic)  # an unknown topic: fail before creating the file
        with progress(args, desc=f"export {topic}", total=total) as bar:
            if fmt == "avro":
                _write_avro(args.file, topic, counted(bar))
            else:
                with _open_text(args.file, "w") as out:
                    for message in counted(bar):
                        record = {
                            "id": message.id_hex,
                            "publishTime": message.publish_ms,
                            "payload": base64.b64encode(message.payload).decode(),
                        }
                        out.write(json.dumps(record) + "\n")
    finally:
        if tx is not None:
            tx.close()
    elapsed = max(time.monotonic() - started, 1e-6)
    where = "stdout" if args.file == "-" else args.file
    said(
        f"exported {count:,} messages ({format_bytes(size)}) of {topic} to {where} "
        f"({fmt}) in {elapsed:.1f} s ({format_rate(count / elapsed)})",
        out=sys.stderr if args.file == "-" else None,
    )
    return 0


def _write_avro(path: str, topic: TopicId, messages: Iterator[Any]) -> None:
    import fastavro  # noqa: PLC0415

    schema = fastavro.parse_schema(MESSAGE_SCHEMA)
    records = (
        {"id": m.id_bytes, "publishTime": m.publish_ms, "payload": m.payload} for m in messages
    )
    with open(path, "wb") as out:
        fastavro.writer(out, schema, records, codec="deflate", metadata={"txms.topic": str(topic)})


@contextlib.contextmanager
def _open_text(path: str, mode: str) -> Iterator[IO[str]]:
    if path == "-":
        yield sys.stdout if mode == "w" else sys.stdin
        return
    with open(path, mode, encoding="utf-8", newline="\n") as f:
        yield f


# -- import -----------------------------------------------------------------------------


def _jsonl_payloads(stream: IO[str]) -> Iterator[bytes]:
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            yield base64.b64decode(record["payload"], validate=True)
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise TmsInvalidArgumentError(
                f"line {number}: not a message ({{'payload': base64, ...}}): {exc}"
            ) from exc


def _avro_payloads(path: str) -> Iterator[bytes]:
    import fastavro  # noqa: PLC0415

    with open(path, "rb") as f:
        try:
            reader = fastavro.reader(f)
        except ValueError as exc:
            raise TmsInvalidArgumentError(f"{path}: not an Avro object container file") from exc
        for number, record in enumerate(reader, 1):
            payload = record.get("payload") if isinstance(record, dict) else None
            if not isinstance(payload, bytes):
                raise TmsInvalidArgumentError(f"{path}: record {number} has no bytes 'payload'")
            yield payload


def _payloads(args: argparse.Namespace, fmt: str) -> Iterator[bytes]:
    if fmt == "avro":
        yield from _avro_payloads(args.file)
        return
    with _open_text(args.file, "r") as stream:
        yield from _jsonl_payloads(stream)


def _import(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    fmt = _format_of(args)
    client.get_topic(topic)  # an unknown topic: fail before reading anything
    total = None
    if args.file != "-":  # check the whole file first: nothing is published from a bad one
        total = sum(1 for _ in _payloads(args, fmt))
    count = size = 0
    started = time.monotonic()
    batch: list[bytes] = []
    try:
        with progress(args, desc=f"import {topic}", total=total) as bar:
            for payload in _payloads(args, fmt):
                batch.append(payload)
                if len(batch) >= max(1, args.batch):
                    client.publish(topic, batch)
                    count, size = count + len(batch), size + sum(map(len, batch))
                    bar.update(len(batch))
                    batch = []
            if batch:
                client.publish(topic, batch)
                count, size = count + len(batch), size + sum(map(len, batch))
                bar.update(len(batch))
    except TmsError as exc:
        raise TmsError(f"{exc} ({count:,} messages were imported before this)") from exc
    elapsed = max(time.monotonic() - started, 1e-6)
    said(
        f"imported {count:,} messages ({format_bytes(size)}) into {topic} from "
        f"{'stdin' if args.file == '-' else args.file} in {elapsed:.1f} s "
        f"({format_rate(count / elapsed)}); order and payloads kept, ids and publish "
        "times are new"
    )
    return 0
