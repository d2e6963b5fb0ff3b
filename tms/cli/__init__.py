"""The ``tms`` command line.

::

    tms serve [--host H] [--port P] [--data-dir D] [--tx-server H:P] [--auth FILE] ...
    tms topics create|update NS TOPIC [--ttl 7d] [--property K=V ...]
    tms topics list NS | get NS TOPIC | delete NS TOPIC | stats NS [TOPIC ...]
    tms publish NS TOPIC [MESSAGE ...]          (no messages: one per line of stdin)
    tms subscriptions create|list|get|delete|seek NS TOPIC [NAME] ...
    tms tail NS TOPIC [--from-start | --from-time T | --from-id HEX | --subscription NAME]
                      [--tx-server H:P]
    tms inspect NS TOPIC [--start-ms T] [--end-ms T] [--limit N]
    tms export NS TOPIC FILE [--format jsonl|avro] [--from-start | ...]
    tms import NS TOPIC FILE [--format jsonl|avro]
    tms queue create|enqueue|receive|ack|nack|stats NS QUEUE ...   (docs/queues.md)
    tms top NS [--interval S] [--iterations N]
    tms metrics [--match TEXT]
    tms cluster status | up [--tms N] [--txn N]
    tms completion bash|zsh

Client commands talk to ``--url`` (default ``$TMS_URL`` or http://127.0.0.1:15166; a
``tms://`` URL speaks the binary protocol; a cluster's instances are several URLs
separated by commas, tried in turn) with ``--token`` (default ``$TMS_TOKEN``); an
https service's certificate is verified against ``--ca-bundle`` (default
``$TMS_CA_BUNDLE``, else the system's trust store). Output, times, payloads, progress
and errors follow ``txn.clikit``. Exit codes: 0 success, 1 failure (one line on stderr,
never a traceback), 2 bad usage, 130 interrupted.

**Adding a command family** (e.g. ``tms subscriptions …``): a module in this package
with ``register(commands)`` that adds its parsers to the sub-parsers action it is given,
each with ``set_defaults(handler=fn)`` where ``fn(args, client) -> int`` gets a
``MessagingClient`` (``client=False`` in the defaults: ``fn(args) -> int`` and no
client); then its name in ``FAMILIES`` below. Listings take
``txn.clikit.add_output_options`` and print with ``emit``; mutating commands end with
``said(...)``; every argument has help text (``tests/tms/test_cli_conventions.py``
walks the parser).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from types import ModuleType

from tms.cli import cluster, messages, observe, queue, serve, subscriptions, topics, transfer
from tms.errors import TmsError
from txn.clikit import add_completion_command, add_version_option, guarded
from txn.errors import TxError

__all__ = ["DEFAULT_URL", "FAMILIES", "build_parser", "main"]

DEFAULT_URL = "http://127.0.0.1:15166"

FAMILIES: tuple[ModuleType, ...] = (
    serve,
    topics,
    subscriptions,
    messages,
    queue,
    transfer,
    observe,
    cluster,
)
"""The modules that register commands, in the order ``tms --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tms",
        description="txms messaging: the service, its topics and messages",
        epilog="Each command has its own --help. Docs: docs/http.md (CLI).",
    )
    add_version_option(p, "tms")
    p.add_argument(
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)"
    )
    p.add_argument(
        "--url",
        default=os.environ.get("TMS_URL", DEFAULT_URL),
        help=f"the messaging service (default $TMS_URL, else {DEFAULT_URL}); a cluster: "
        "several URLs separated by commas",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("TMS_TOKEN"),
        help="bearer token when the service requires one (default $TMS_TOKEN)",
    )
    p.add_argument(
        "--ca-bundle",
        default=os.environ.get("TMS_CA_BUNDLE"),
        help="PEM file of the CA(s) that signed an https service's certificate "
        "(default $TMS_CA_BUNDLE, else the system's trust store)",
    )
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in FAMILIES:
        family.register(commands)
    add_completion_command(commands, "tms", build_parser)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return guarded("tms", (TmsError, TxError, OSError, ValueError), lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if not getattr(args, "client", True):
        code: int = args.handler(args)
        return code
    from tms.client import MessagingClient  # noqa: PLC0415

    with MessagingClient(args.url, token=args.token, ca_bundle=args.ca_bundle) as client:
        code = args.handler(args, client)
        return code


if __name__ == "__main__":
    sys.exit(main())
