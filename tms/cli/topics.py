"""``tms topics …``: create, update, list, get, delete, and stats.

::

    tms topics create NS TOPIC [--ttl 7d] [--property K=V ...]
    tms topics update NS TOPIC [--ttl 7d] [--property K=V ...]
    tms topics list NS | get NS TOPIC | delete NS TOPIC
    tms topics stats NS [TOPIC ...]
"""

from __future__ import annotations

import argparse
from typing import Any

from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId
from txn.clikit import (
    Column,
    add_output_options,
    emit,
    emit_object,
    format_duration,
    parse_duration,
    said,
)

__all__ = ["STATS_COLUMNS", "register"]

STATS_COLUMNS = (
    Column("TOPIC", "topic"),
    Column("MESSAGES", "messages", "int"),
    Column("BYTES", "payloadBytes", "bytes"),
    Column("ON DISK", "diskBytes", "bytes"),
    Column("RATE", "publishRate", "rate"),
    Column("FIRST PUBLISH", "firstPublishTime", "time"),
    Column("LAST PUBLISH", "lastPublishTime", "time"),
    Column("TTL", "ttl", "duration"),
)


def _namespace(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("namespace", help="namespace ([A-Za-z0-9_]+)")


def _topic(cmd: argparse.ArgumentParser) -> None:
    _namespace(cmd)
    cmd.add_argument("topic", help="topic ([A-Za-z0-9_-]+)")


def register(commands: Any) -> None:
    group = commands.add_parser(
        "topics", help="create, list, change and delete topics; their stats"
    )
    topics = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (
        ("create", "create a topic"),
        ("update", "replace a topic's properties (the generation stays)"),
    ):
        cmd = topics.add_parser(name, help=text)
        _topic(cmd)
        cmd.add_argument(
            "--ttl",
            type=parse_duration,
            help="how long messages live: seconds, or 90s, 15m, 12h, 7d "
            "(default: the service's, 7d unless configured)",
        )
        cmd.add_argument(
            "--property",
            action="append",
            default=[],
            metavar="K=V",
            help="another property (repeatable)",
        )
        cmd.set_defaults(handler=_create if name == "create" else _update)

    listing = topics.add_parser("list", help="the topics of a namespace")
    _namespace(listing)
    add_output_options(listing, times=False)
    listing.set_defaults(handler=_list)

    get = topics.add_parser("get", help="a topic's properties")
    _topic(get)
    add_output_options(get, times=False)
    get.set_defaults(handler=_get)

    delete = topics.add_parser("delete", help="delete a topic (its messages vanish at once)")
    _topic(delete)
    delete.set_defaults(handler=_delete)

    stats = topics.add_parser(
        "stats",
        help="messages, bytes, first/last publish and publish rate per topic",
        description="What topics hold, read without consuming. Counts are exact up to "
        "20,000 rows per topic and estimates beyond (JSON: exact=false); the rate is "
        "messages per second over the last minute.",
    )
    _namespace(stats)
    stats.add_argument("topics", nargs="*", metavar="TOPIC", help="only these (default: all)")
    add_output_options(stats)
    stats.set_defaults(handler=_stats)


def _properties(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TmsInvalidArgumentError(f"--property wants K=V, got {item!r}")
        props[key] = value
    if args.ttl is not None:
        props["ttl"] = str(args.ttl)
    return props


def _described(properties: dict[str, str]) -> str:
    """``ttl 7d, owner=me``."""
    parts = []
    for key, value in sorted(properties.items()):
        if key == "generation":
            continue
        if key == "ttl" and value.isdigit():
            parts.append(f"ttl {format_duration(int(value))}")
        else:
            parts.append(f"{key}={value}")
    return ", ".join(parts)


def _create(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    client.create_topic(topic, _properties(args))
    said(f"created topic {topic} ({_described(client.get_topic(topic))})")
    return 0


def _update(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    client.update_topic(topic, _properties(args))
    said(f"updated topic {topic} ({_described(client.get_topic(topic))})")
    return 0


def _delete(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    client.delete_topic(topic)
    said(f"deleted topic {topic}")
    return 0


def _list(args: argparse.Namespace, client: Any) -> int:
    names = client.list_topics(args.namespace)
    emit(args, [{"topic": name} for name in names], [Column("TOPIC", "topic")])
    return 0


def _get(args: argparse.Namespace, client: Any) -> int:
    topic = TopicId(args.namespace, args.topic)
    properties: dict[str, Any] = dict(client.get_topic(topic))
    if args.output == "json":
        emit_object(args, properties, ())
        return 0
    record: dict[str, Any] = {"topic": str(topic)}
    for key, value in properties.items():
        record[key] = int(value) if key in ("ttl", "generation") and value.isdigit() else value
    fields = (
        Column("topic", "topic"),
        Column("ttl", "ttl", "duration"),
        Column("generation", "generation"),
    )
    emit_object(args, record, fields)
    return 0


def _stats(args: argparse.Namespace, client: Any) -> int:
    if args.topics:
        records = [client.topic_stats(TopicId(args.namespace, name)) for name in args.topics]
    else:
        records = client.namespace_stats(args.namespace)
    emit(args, records, STATS_COLUMNS)
    if args.output == "table" and any(not r.get("exact", True) for r in records):
        said("(topics over 20,000 rows: MESSAGES and BYTES are estimates)")
    return 0
