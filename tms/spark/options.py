"""The data source's options (Spark passes them as strings, names case-insensitive),
parsed and checked once, on the driver, for one of four uses (``Use``). An option the use
does not know is refused with ``TmsInvalidArgumentError`` naming it, and the uses it
belongs to: a misspelt option never silently does nothing.

=========================  =======  ========================================================
option                     uses     meaning
=========================  =======  ========================================================
``url``                    all      the messaging service (required; a cluster's
                                    instances separated by commas)
``namespace``              all      the topics' namespace (default ``default``)
``token``                  all      bearer token for the messaging service
``txServer``               all      ``HOST:PORT`` of the transaction server (needed to
                                    write, and to read transactionally)
``caBundle``               all      CA certificates (PEM file) to check an ``https``
                                    ``url`` against (default: the system's)
``txTlsCa``                all      TLS to the transaction server, checked against this
                                    CA (PEM file) ...
``txTlsCert``              all      ... presenting this client certificate (PEM file) ...
``txTlsKey``               all      ... and its key, when the server requires one
``topic``                  all      the topic; for writes optional when the DataFrame has a
                                    ``topic`` column (the option wins over the column)
``topics``                 reads    comma-separated topics
``topicPattern``           reads    a regular expression: every topic of the namespace
                                    whose whole name matches (streams pick up new ones)
``transactional``          reads    ``true`` (default when ``txServer`` is set) or ``false``
``partitions``             reads    Spark partitions per topic and read (default 4)
``startTime``              read     from this time (ms since the epoch, or ISO-8601)
``endTime``                read     messages published before this time
``startId``                read     after this message id (hex), exclusive
``pushFilters``            read     ``true``: filters on ``publish_time`` narrow the read
``startingOffsets``        stream   ``earliest`` (default), ``latest``, or JSON per topic:
                                    ``-2`` earliest, ``-1`` latest, a message id (hex, read
                                    from it, inclusive) or an offset as Spark records it
``startingTimestamp``      stream   start at the first message published at or after this
                                    time (ms or ISO-8601); wins over ``startingOffsets``
``maxOffsetsPerTrigger``   stream   at most this many messages per micro-batch
``minOffsetsPerTrigger``   stream   wait for this many messages before a micro-batch ...
``maxTriggerDelay``        stream   ... but no longer than this (``15m``; ``ms/s/m/h``)
``failOnDataLoss``         stream   ``true`` (default): fail when messages expired before
                                    the query read them; ``false``: log and go on
``batchSize``              writes   payloads per ``store`` request (default 1000)
``txTimeoutS``             writes   timeout of the job's (or micro-batch's) transaction,
                                    renewed while the driver lives (default 60)
``transaction``            write    join this long transaction (Tephra codec, base64)
``checkpointLocation``     stream   set by Spark for a streaming write
                           write
=========================  =======  ========================================================

"read"/"write" are batch reads and writes, "stream read"/"stream write" streaming ones.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId, validate_namespace
from txn.errors import TxError

if TYPE_CHECKING:  # the clients load on first use: a task or planner may need neither
    from tms.client.http import MessagingClient
    from txn.rpc.client import ThriftTxClient
    from txn.rpc.tls import ClientTls

__all__ = ["EARLIEST", "LATEST", "SourceOptions", "Use", "parse_duration_ms", "parse_time_ms"]

EARLIEST = -2
LATEST = -1
"""Kafka's codes for a topic's start in ``startingOffsets`` JSON."""


class Use(enum.Enum):
    READ = "batch reads"
    STREAM_READ = "streaming reads"
    WRITE = "batch writes"
    STREAM_WRITE = "streaming writes"


_COMMON = frozenset(
    {"url", "namespace", "token", "txserver", "topic", "cabundle", "txtlsca", "txtlscert"}
    | {"txtlskey"}
)
_READS = _COMMON | {"topics", "topicpattern", "transactional", "partitions"}
_WRITES = _COMMON | {"batchsize", "txtimeouts"}
_ALLOWED: dict[Use, frozenset[str]] = {
    Use.READ: _READS | {"starttime", "endtime", "startid", "pushfilters"},
    Use.STREAM_READ: _READS
    | {
        "startingoffsets",
        "startingtimestamp",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "failondataloss",
    },
    Use.WRITE: _WRITES | {"transaction"},
    Use.STREAM_WRITE: _WRITES | {"checkpointlocation"},
}
_OPTION_NAMES = (
    "url namespace token txServer topic topics topicPattern transactional partitions "
    "startTime endTime startId pushFilters startingOffsets startingTimestamp "
    "maxOffsetsPerTrigger minOffsetsPerTrigger maxTriggerDelay failOnDataLoss "
    "batchSize txTimeoutS transaction checkpointLocation caBundle txTlsCa txTlsCert txTlsKey"
)
_NAMES = {name.lower(): name for name in _OPTION_NAMES.split(" ")}


def parse_time_ms(text: str, what: str) -> int:
    """Milliseconds since the epoch from digits or an ISO-8601 time (UTC if no zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        value = int(text)
    else:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as exc:
            raise TmsInvalidArgumentError(f"{what}: not ms or ISO-8601: {text!r}") from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        value = int(moment.timestamp() * 1000)
    if value < 0:
        raise TmsInvalidArgumentError(f"{what} must not be negative")
    return value


_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h)?")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


def parse_duration_ms(text: str, what: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``1h``, or plain seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise TmsInvalidArgumentError(f"{what}: not a duration like 30s or 15m: {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def _bool(text: str, what: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise TmsInvalidArgumentError(f"{what} must be true or false, got {text!r}")
    return lowered == "true"


def _positive(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise TmsInvalidArgumentError(f"{what} must be an integer, got {text!r}") from exc
    if value <= 0:
        raise TmsInvalidArgumentError(f"{what} must be positive")
    return value


def _check_known(opts: Mapping[str, str], use: Use) -> None:
    allowed = _ALLOWED[use]
    for key in opts:
        if key in allowed:
            continue
        name = _NAMES.get(key)
        if name is None:
            raise TmsInvalidArgumentError(
                f"unknown option {key!r} for the tms data source (see docs/spark.md)"
            )
        uses = ", ".join(u.value for u in Use if key in _ALLOWED[u])
        raise TmsInvalidArgumentError(f"option {name} is for {uses}, not for {use.value}")


def _starting(text: str) -> int | dict[str, Any]:
    lowered = text.strip().lower()
    if lowered == "earliest":
        return EARLIEST
    if lowered == "latest":
        return LATEST
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise TmsInvalidArgumentError(
            "startingOffsets is earliest, latest or JSON of positions per topic"
        ) from exc
    if not isinstance(value, dict) or not value:
        raise TmsInvalidArgumentError("startingOffsets JSON must be an object of topics")
    return value


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """See the module docstring. ``topics`` holds ``topic`` or ``topics`` (empty when
    neither was given); ``starting`` is ``EARLIEST``, ``LATEST`` or the JSON object."""

    url: str
    namespace: str = "default"
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    tx_server: str | None = None
    token: str | None = None
    transactional: bool = False
    partitions: int = 4
    start_ms: int | None = None
    end_ms: int | None = None
    start_id: bytes | None = None
    push_filters: bool = False
    starting: int | dict[str, Any] = EARLIEST
    starting_ms: int | None = None
    max_rows: int | None = None
    min_rows: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    batch_size: int = 1000
    tx_timeout_s: int = 60
    transaction: bytes | None = None
    checkpoint_location: str | None = None
    ca_bundle: str | None = None
    tx_tls: ClientTls | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], use: Use) -> SourceOptions:
        """Options as Spark hands them over, for ``use``."""
        opts = {k.lower(): v for k, v in options.items()}
        _check_known(opts, use)
        url = opts.get("url")
        if not url:
            raise TmsInvalidArgumentError("the tms data source needs the url option")
        namespace = validate_namespace(opts.get("namespace", "default"))
        topics = _topics(opts, use, namespace)
        pattern = opts.get("topicpattern")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise TmsInvalidArgumentError(f"topicPattern is not a regex: {exc}") from exc
        tx_server = opts.get("txserver") or None
        transactional = (
            _bool(opts["transactional"], "transactional")
            if "transactional" in opts
            else tx_server is not None
        )
        if transactional and tx_server is None:
            raise TmsInvalidArgumentError("a transactional read needs the txServer option")
        if use in (Use.WRITE, Use.STREAM_WRITE) and tx_server is None:
            raise TmsInvalidArgumentError("writing to tms needs the txServer option")
        max_rows = _opt_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
        min_rows = _opt_positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
        if max_rows is not None and min_rows is not None and min_rows > max_rows:
            raise TmsInvalidArgumentError("minOffsetsPerTrigger exceeds maxOffsetsPerTrigger")
        return cls(
            url=url,
            namespace=namespace,
            topics=topics,
            topic_pattern=pattern,
            tx_server=tx_server,
            token=opts.get("token") or None,
            transactional=transactional,
            partitions=_positive(opts.get("partitions", "4"), "partitions"),
            start_ms=_opt_time(opts, "starttime", "startTime"),
            end_ms=_opt_time(opts, "endtime", "endTime"),
            start_id=_start_id(opts),
            push_filters=_bool(opts.get("pushfilters", "false"), "pushFilters"),
            starting=_starting(opts.get("startingoffsets", "earliest")),
            starting_ms=_opt_time(opts, "startingtimestamp", "startingTimestamp"),
            max_rows=max_rows,
            min_rows=min_rows,
            max_trigger_delay_ms=parse_duration_ms(
                opts.get("maxtriggerdelay", "15m"), "maxTriggerDelay"
            ),
            fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
            batch_size=_positive(opts.get("batchsize", "1000"), "batchSize"),
            tx_timeout_s=_positive(opts.get("txtimeouts", "60"), "txTimeoutS"),
            transaction=_transaction(opts),
            checkpoint_location=opts.get("checkpointlocation") or None,
            ca_bundle=opts.get("cabundle") or None,
            tx_tls=_tx_tls(opts),
        )

    @property
    def topic(self) -> str | None:
        """The one topic named by ``topic`` (writes), if any."""
        return self.topics[0] if len(self.topics) == 1 else None

    def topic_id(self, name: str) -> TopicId:
        return TopicId(self.namespace, name)

    def require_tx_server(self) -> str:
        if self.tx_server is None:
            raise TmsInvalidArgumentError("this needs the txServer option")
        return self.tx_server

    def messaging(self) -> MessagingClient:
        """A client of the messaging service these options name."""
        from tms.client.http import MessagingClient  # noqa: PLC0415 - see the imports

        return MessagingClient(self.url, token=self.token, ca_bundle=self.ca_bundle)

    def tx_client(self, address: str | None = None) -> ThriftTxClient:
        """A client of the transaction server (``txServer``, or ``address``)."""
        from txn.rpc.client import ThriftTxClient  # noqa: PLC0415 - see the imports

        return ThriftTxClient(address or self.require_tx_server(), tls=self.tx_tls)


def speaks_binary(client: MessagingClient) -> bool:
    """Whether ``client`` speaks the binary protocol (``tms://``): asked without loading
    that client's modules, which a client over HTTP never needs."""
    rpc = sys.modules.get("tms.client.rpc")
    return rpc is not None and isinstance(client, rpc.RpcMessagingClient)


def _topics(opts: Mapping[str, str], use: Use, namespace: str) -> tuple[str, ...]:
    given = [k for k in ("topic", "topics", "topicpattern") if opts.get(k)]
    if use in (Use.READ, Use.STREAM_READ) and len(given) != 1:
        raise TmsInvalidArgumentError(
            "a read needs exactly one of the topic, topics and topicPattern options"
        )
    if "topics" in given:
        names = tuple(dict.fromkeys(t.strip() for t in opts["topics"].split(",") if t.strip()))
    elif "topic" in given:
        names = (opts["topic"].strip(),)
    else:
        return ()
    for name in names:
        TopicId(namespace, name)  # validates the name
    if not names:
        raise TmsInvalidArgumentError("topics names no topic")
    return names


def _opt_positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    return _positive(opts[key], name) if key in opts else None


def _opt_time(opts: Mapping[str, str], key: str, name: str) -> int | None:
    return parse_time_ms(opts[key], name) if key in opts else None


def _start_id(opts: Mapping[str, str]) -> bytes | None:
    if "startid" not in opts:
        return None
    try:
        start_id = bytes.fromhex(opts["startid"])
    except ValueError as exc:
        raise TmsInvalidArgumentError("startId must be a hex message id") from exc
    if len(start_id) != 20:
        raise TmsInvalidArgumentError("startId must be a 20-byte message id")
    return start_id


def _tx_tls(opts: Mapping[str, str]) -> ClientTls | None:
    given = [opts.get(k) or None for k in ("txtlsca", "txtlscert", "txtlskey")]
    if not any(given):
        return None
    from txn.rpc.tls import client_tls  # noqa: PLC0415 - see the imports

    try:
        return client_tls(*given)
    except TxError as exc:
        raise TmsInvalidArgumentError(f"txTlsCa/txTlsCert/txTlsKey: {exc}") from exc


def _transaction(opts: Mapping[str, str]) -> bytes | None:
    if "transaction" not in opts:
        return None
    try:
        return base64.b64decode(opts["transaction"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TmsInvalidArgumentError("transaction must be base64") from exc
