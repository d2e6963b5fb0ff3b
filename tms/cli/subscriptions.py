"""``tms subscriptions …``: create, list, get, delete and seek subscriptions.

::

    tms subscriptions create NS TOPIC NAME [--start earliest|latest | --start-time T |
                                            --start-id HEX] [--transactional]
                                           [--filter-prefix TEXT ...]
    tms subscriptions list NS TOPIC
    tms subscriptions get NS TOPIC NAME
    tms subscriptions delete NS TOPIC NAME [--version V]
    tms subscriptions seek NS TOPIC NAME (--earliest | --latest | --time T | --id HEX)
                                         [--version V]

Updates carry the version they read: ``--version`` says which (a stale one is refused:
``bad_version``); without it, the command reads the subscription first and uses its
version, so it still fails rather than overwrite a change made in between.
``tms tail NS TOPIC --subscription NAME`` reads through a subscription (``tms.cli.messages``).
"""

from __future__ import annotations

import argparse
from typing import Any

from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import PayloadFilter, Preferences, Start, SubscriptionId
from txn.clikit import (
    Column,
    add_output_options,
    emit,
    emit_object,
    escape_payload,
    parse_time,
    said,
)

__all__ = ["SUBSCRIPTION_COLUMNS", "register", "subscription_record"]

SUBSCRIPTION_COLUMNS = (
    Column("NAME", "name"),
    Column("LAG", "lagMessages", "int"),
    Column("POSITION", "position"),
    Column("VERSION", "version", "int"),
    Column("UPDATED", "updated", "time"),
    Column("READS", "reads"),
    Column("FILTER", "filterText"),
)


def _sub(cmd: argparse.ArgumentParser, *, name: bool = True) -> None:
    cmd.add_argument("namespace", help="namespace ([A-Za-z0-9_]+)")
    cmd.add_argument("topic", help="topic ([A-Za-z0-9_-]+)")
    if name:
        cmd.add_argument("name", help="subscription ([A-Za-z0-9_-]+)")


def _version(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--version",
        type=int,
        help="the version last read (default: read it now; a stale one is refused)",
    )


def register(commands: Any) -> None:
    group = commands.add_parser(
        "subscriptions", help="subscriptions: positions the service keeps for readers"
    )
    subs = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = subs.add_parser("create", help="create a subscription")
    _sub(create)
    where = create.add_mutually_exclusive_group()
    where.add_argument(
        "--start",
        choices=("earliest", "latest"),
        default="earliest",
        help="from the oldest message (default), or after the newest",
    )
    where.add_argument(
        "--start-time",
        type=parse_time,
        metavar="TIME",
        help="from the first message published at or after this time (ISO-8601 or ms)",
    )
    where.add_argument("--start-id", metavar="HEX", help="from this message id (inclusive)")
    create.add_argument(
        "--transactional",
        action="store_true",
        help="read committed messages only (readers need a transaction server)",
    )
    create.add_argument(
        "--filter-prefix",
        action="append",
        default=[],
        metavar="TEXT",
        help="deliver only messages starting with this text (repeatable: any of them)",
    )
    add_output_options(create)
    create.set_defaults(handler=_create)

    listing = subs.add_parser("list", help="a topic's subscriptions with their lag")
    _sub(listing, name=False)
    add_output_options(listing)
    listing.set_defaults(handler=_list)

    get = subs.add_parser("get", help="a subscription: position, lag, version, preferences")
    _sub(get)
    add_output_options(get)
    get.set_defaults(handler=_get)

    delete = subs.add_parser("delete", help="delete a subscription")
    _sub(delete)
    _version(delete)
    delete.set_defaults(handler=_delete)

    seek = subs.add_parser("seek", help="move a subscription's position (backwards too)")
    _sub(seek)
    to = seek.add_mutually_exclusive_group(required=True)
    to.add_argument("--earliest", action="store_true", help="to the oldest message")
    to.add_argument("--latest", action="store_true", help="after the newest message")
    to.add_argument(
        "--time",
        type=parse_time,
        metavar="TIME",
        help="to the first message published at or after this time (ISO-8601 or ms)",
    )
    to.add_argument("--id", metavar="HEX", help="to this message id (inclusive)")
    _version(seek)
    add_output_options(seek)
    seek.set_defaults(handler=_seek)


def subscription_record(info: Any) -> dict[str, Any]:
    """A subscription as the REST API's JSON, with the table's own columns added."""
    record: dict[str, Any] = info.to_json()
    lag = info.lag
    record["lagMessages"] = None if lag is None else lag.messages
    record["reads"] = "committed" if info.preferences.transactional else "everything"
    flt = info.preferences.filter
    record["filterText"] = (
        " | ".join(escape_payload(p) for p in flt.prefixes) if flt is not None else ""
    )
    return record


def _show(args: argparse.Namespace, records: list[dict[str, Any]]) -> None:
    if args.output == "json":
        hidden = ("lagMessages", "reads", "filterText")
        records = [{k: v for k, v in r.items() if k not in hidden} for r in records]
    emit(args, records, SUBSCRIPTION_COLUMNS)
    if args.output == "table" and any(r["lag"] and not r["lag"]["exact"] for r in records):
        said("(LAG beyond the newest 10,000 rows of a topic is estimated)")


def _id(args: argparse.Namespace) -> SubscriptionId:
    return SubscriptionId(TopicId(args.namespace, args.topic), args.name)


def _lag_text(info: Any) -> str:
    lag = info.lag
    if lag is None:
        return "lag unknown"
    return f"lag {lag.messages:,}" + ("" if lag.exact else " (estimated)")


def _create(args: argparse.Namespace, client: Any) -> int:
    if args.start_time is not None:
        start = Start.at_time(int(args.start_time))
    elif args.start_id is not None:
        start = Start.at_id(MessageId.from_hex(args.start_id))
    else:
        start = Start.latest() if args.start == "latest" else Start.earliest()
    prefixes = tuple(p.encode() for p in args.filter_prefix)
    preferences = Preferences(
        start, args.transactional, PayloadFilter(prefixes) if prefixes else None
    )
    info = client.create_subscription(_id(args), preferences)
    if args.output == "json":
        emit_object(args, info.to_json(), ())
        return 0
    said(f"created subscription {info.id} at {info.position.hex} ({_lag_text(info)})")
    return 0


def _list(args: argparse.Namespace, client: Any) -> int:
    infos = client.list_subscriptions(TopicId(args.namespace, args.topic))
    _show(args, [subscription_record(i) for i in infos])
    return 0


def _get(args: argparse.Namespace, client: Any) -> int:
    info = client.get_subscription(_id(args))
    if args.output == "json":
        emit_object(args, info.to_json(), ())
        return 0
    record = subscription_record(info)
    shown = {
        "subscription": str(info.id),
        "position": info.position.hex,
        "lag": _lag_text(info).removeprefix("lag "),
        "version": info.version,
        "updated": info.updated_ms,
        "committed by": info.committed_by,
        "generation": info.generation,
        "reads": record["reads"],
        "filter": record["filterText"],
        "start": str(record["preferences"]["start"]),
    }
    emit_object(args, shown, (Column("updated", "updated", "time"),))
    return 0


def _current_version(args: argparse.Namespace, client: Any) -> int:
    if args.version is not None:
        return int(args.version)
    return int(client.get_subscription(_id(args)).version)


def _delete(args: argparse.Namespace, client: Any) -> int:
    client.delete_subscription(_id(args), _current_version(args, client))
    said(f"deleted subscription {_id(args)}")
    return 0


def _seek(args: argparse.Namespace, client: Any) -> int:
    if args.earliest:
        to = Start.earliest()
    elif args.latest:
        to = Start.latest()
    elif args.time is not None:
        to = Start.at_time(int(args.time))
    else:
        to = Start.at_id(MessageId.from_hex(args.id))
    info = client.seek_subscription(_id(args), to, _current_version(args, client))
    if args.output == "json":
        emit_object(args, info.to_json(), ())
        return 0
    said(
        f"moved subscription {info.id} to {info.position.hex} ({_lag_text(info)}, "
        f"version {info.version})"
    )
    return 0
