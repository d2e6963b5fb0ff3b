"""``tms cluster status`` and ``tms cluster up``: a cluster of messaging instances.

::

    tms cluster status [-o table|json]
    tms cluster up [--tms N] [--txn N]

``status`` shows the live instances (``GET /v1/cluster`` of whichever instance of
``--url`` answers: several URLs, separated by commas, are tried in turn) and the topics
each owns; ``up`` starts a whole cluster on this machine to try (``tms.cluster.up``;
``make run-cluster``).
"""

from __future__ import annotations

import argparse
from typing import Any

from txn.clikit import Column, add_output_options, emit

__all__ = ["register"]

_COLUMNS = (
    Column("INSTANCE", "id"),
    Column("URL", "url"),
    Column("OWNS", "topics", "int"),
    Column("ANSWERED", "answered"),
)


def register(commands: Any) -> None:
    cluster = commands.add_parser(
        "cluster", help="a cluster of messaging instances: its status, or one to try"
    )
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = actions.add_parser(
        "status", help="the live instances and the topics each owns (GET /v1/cluster)"
    )
    add_output_options(status, times=False)
    status.set_defaults(handler=_status)
    up = actions.add_parser(
        "up",
        help="start ZooKeeper, PostgreSQL, transaction servers and messaging instances "
        "on this machine until Ctrl-C (make run-cluster)",
    )
    up.add_argument("--tms", type=int, default=3, help="messaging instances (default 3)")
    up.add_argument("--txn", type=int, default=2, help="transaction servers (default 2)")
    up.set_defaults(handler=_up, client=False)


def _status(args: argparse.Namespace, client: Any) -> int:
    status = client.cluster()
    if status.get("mode") != "cluster":
        print("standalone: one instance, no cluster")
        return 0
    owned: dict[str, list[str]] = {}
    for topic, owner in status["owners"].items():
        owned.setdefault(owner, []).append(topic)
    me = status["self"]["id"]
    records = [
        {
            "id": i["id"],
            "url": i["url"],
            "topics": len(owned.get(i["id"], [])),
            "owned": owned.get(i["id"], []),
            "answered": "yes" if i["id"] == me else "",
        }
        for i in status["instances"]
    ]
    emit(args, records, _COLUMNS)
    return 0


def _up(args: argparse.Namespace) -> int:
    from tms.cluster.up import run_cluster  # noqa: PLC0415 - starts engines

    return run_cluster(tms=args.tms, txn=args.txn)
