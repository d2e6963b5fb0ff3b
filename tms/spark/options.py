"""The data source's options (Spark passes them as strings), parsed and checked once.

=====================  =============================================================
option                 meaning
=====================  =============================================================
``url``                the messaging service (required; a cluster's instances
                       separated by commas)
``namespace``          the topic's namespace (default ``default``)
``topic``              the topic (required)
``txServer``           ``HOST:PORT`` of the transaction server (needed to write, and to
                       read transactionally)
``token``              bearer token for the messaging service
``transaction``        write: join this transaction (Tephra ``TransactionCodec`` bytes,
                       base64) instead of starting one; the caller commits it
``batchSize``          write: payloads per ``store`` request (default 1000)
``transactional``      read: ``true`` (default when ``txServer`` is set) or ``false``
``startTime``          read: from this time (ms since the epoch, or ISO-8601)
``endTime``            read: messages published before this time
``startId``            read: from this message id (hex), exclusive
``partitions``         read: how many partitions to split a read into (default 4)
``pushFilters``        read: ``true`` to narrow the read by filters on ``publish_time``
                       (needs ``spark.sql.python.filterPushdown.enabled``, Spark 4.1+)
``startingOffsets``    stream read: ``earliest`` (default) or ``latest``
``writerId``           stream write: names the query for idempotent commits (default:
                       derived from ``checkpointLocation``; one of the two is required)
``taskTimeoutS``       stream write: timeout of each task's transaction (default 600)
=====================  =============================================================
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId

__all__ = ["SourceOptions", "parse_time_ms"]


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


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """See the module docstring."""

    url: str
    topic: TopicId
    tx_server: str | None = None
    token: str | None = None
    transaction: bytes | None = None
    batch_size: int = 1000
    transactional: bool = False
    start_ms: int | None = None
    end_ms: int | None = None
    start_id: bytes | None = None
    partitions: int = 4
    push_filters: bool = False
    starting_latest: bool = False
    writer_id: str | None = None
    task_timeout_s: int = 600

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Options as Spark hands them over (keys case-insensitive)."""
        opts = {k.lower(): v for k, v in options.items()}
        url, topic = opts.get("url"), opts.get("topic")
        if not url or not topic:
            raise TmsInvalidArgumentError("the tms data source needs the url and topic options")
        tx_server = opts.get("txserver") or None
        transaction = None
        if "transaction" in opts:
            try:
                transaction = base64.b64decode(opts["transaction"], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise TmsInvalidArgumentError("transaction must be base64") from exc
        start_id = None
        if "startid" in opts:
            try:
                start_id = bytes.fromhex(opts["startid"])
            except ValueError as exc:
                raise TmsInvalidArgumentError("startId must be a hex message id") from exc
            if len(start_id) != 20:
                raise TmsInvalidArgumentError("startId must be a 20-byte message id")
        transactional = (
            _bool(opts["transactional"], "transactional")
            if "transactional" in opts
            else tx_server is not None
        )
        if transactional and tx_server is None:
            raise TmsInvalidArgumentError("a transactional read needs the txServer option")
        starting = opts.get("startingoffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise TmsInvalidArgumentError("startingOffsets is earliest or latest")
        writer_id = opts.get("writerid")
        if writer_id is None and opts.get("checkpointlocation"):
            digest = hashlib.sha256(opts["checkpointlocation"].encode()).hexdigest()[:16]
            writer_id = f"ckpt-{digest}"
        return cls(
            url=url,
            topic=TopicId(opts.get("namespace", "default"), topic),
            tx_server=tx_server,
            token=opts.get("token") or None,
            transaction=transaction,
            batch_size=_positive(opts.get("batchsize", "1000"), "batchSize"),
            transactional=transactional,
            start_ms=parse_time_ms(opts["starttime"], "startTime") if "starttime" in opts else None,
            end_ms=parse_time_ms(opts["endtime"], "endTime") if "endtime" in opts else None,
            start_id=start_id,
            partitions=_positive(opts.get("partitions", "4"), "partitions"),
            push_filters=_bool(opts.get("pushfilters", "false"), "pushFilters"),
            starting_latest=starting == "latest",
            writer_id=writer_id,
            task_timeout_s=_positive(opts.get("tasktimeouts", "600"), "taskTimeoutS"),
        )

    def require_tx_server(self) -> str:
        if self.tx_server is None:
            raise TmsInvalidArgumentError("writing to tms needs the txServer option")
        return self.tx_server
