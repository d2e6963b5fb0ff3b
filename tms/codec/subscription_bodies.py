"""The JSON bodies of the subscription routes (pure). Shapes of ``Preferences`` and
``Start`` are those of ``tms.codec.subscriptions``; ids are 40 hex digits, bytes
base64 (a transaction: Tephra's ``TransactionCodec`` bytes), times milliseconds::

    Subscription         {"namespace", "topic", "name", "version": n, "position": "<hex>",
                          "committedBy": int | null, "updated": ms, "generation": n,
                          "preferences": Preferences,
                          "lag": {"messages": n, "exact": bool} | null}
    PreferencesUpdate    {"preferences": Preferences, "version": n}
    CommitRequest        {"position": "<hex>", "version": n,
                          "transaction": "<base64>" | null, "inTransaction": bool}
    CommitResponse       Subscription, or with "inTransaction": true
                         {"position": "<hex>", "version": n, "transactionWritePointer": n}
    SeekRequest          {"to": Start, "version": n, "transaction": "<base64>" | null}
    PositionsRollback    {"transactionWritePointers": [n, ...]}        (1..1,000)
    TransactionsFinished {"transactionWritePointers": [n, ...]}        (1..1,000)
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from tms.codec.json import loads_object
from tms.codec.subscriptions import preferences_from_json, preferences_to_json, start_from_json
from tms.errors import TmsInvalidArgumentError
from tms.ids import MessageId
from tms.subscription import Lag, Preferences, Start, Subscription

__all__ = [
    "CommitRequest",
    "SeekRequest",
    "decode_commit_request",
    "decode_preferences",
    "decode_preferences_update",
    "decode_seek_request",
    "decode_write_pointers",
    "encode_commit_request",
    "encode_seek_request",
    "lag_from_json",
    "subscription_to_json",
]

MAX_POINTERS = 1000


def _version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TmsInvalidArgumentError("version must be the positive integer last read")
    return value


def _transaction(value: Any) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TmsInvalidArgumentError("transaction must be base64 or null")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TmsInvalidArgumentError(f"transaction is not valid base64: {exc}") from exc


def _b64(value: bytes | None) -> str | None:
    return base64.b64encode(value).decode() if value is not None else None


def subscription_to_json(sub: Subscription) -> dict[str, Any]:
    return {
        "namespace": sub.id.topic.namespace,
        "topic": sub.id.topic.topic,
        "name": sub.id.name,
        "version": sub.version,
        "position": sub.position.hex,
        "committedBy": sub.committed_by,
        "updated": sub.updated_ms,
        "generation": sub.state.generation,
        "preferences": preferences_to_json(sub.preferences),
        "lag": None if sub.lag is None else {"messages": sub.lag.messages, "exact": sub.lag.exact},
    }


def lag_from_json(value: Any) -> Lag | None:
    if not isinstance(value, dict):
        return None
    return Lag(int(value["messages"]), bool(value["exact"]))


def decode_preferences(data: bytes) -> Preferences:
    """A create's body: Preferences (empty: the defaults)."""
    return preferences_from_json(loads_object(data, "Preferences"))


def decode_preferences_update(data: bytes) -> tuple[Preferences, int]:
    obj = loads_object(data, "PreferencesUpdate")
    preferences = obj.get("preferences")
    if not isinstance(preferences, dict):
        raise TmsInvalidArgumentError("preferences must be an object")
    return preferences_from_json(preferences), _version(obj.get("version"))


@dataclass(frozen=True, slots=True)
class CommitRequest:
    position: MessageId
    version: int
    transaction: bytes | None
    in_transaction: bool


def encode_commit_request(request: CommitRequest) -> bytes:
    return json.dumps(
        {
            "position": request.position.hex,
            "version": request.version,
            "transaction": _b64(request.transaction),
            "inTransaction": request.in_transaction,
        }
    ).encode()


def decode_commit_request(data: bytes) -> CommitRequest:
    obj = loads_object(data, "CommitRequest")
    position = obj.get("position")
    if not isinstance(position, str):
        raise TmsInvalidArgumentError("position must be a hex message id")
    in_tx = obj.get("inTransaction", False)
    if not isinstance(in_tx, bool):
        raise TmsInvalidArgumentError("inTransaction must be true or false")
    request = CommitRequest(
        MessageId.from_hex(position),
        _version(obj.get("version")),
        _transaction(obj.get("transaction")),
        in_tx,
    )
    if in_tx and request.transaction is None:
        raise TmsInvalidArgumentError("a commit in a transaction carries the transaction")
    return request


@dataclass(frozen=True, slots=True)
class SeekRequest:
    to: Start
    version: int
    transaction: bytes | None


def encode_seek_request(to: Any, version: int, transaction: bytes | None) -> bytes:
    """``to``: the JSON of a Start (``tms.codec.subscriptions.start_to_json``)."""
    return json.dumps({"to": to, "version": version, "transaction": _b64(transaction)}).encode()


def decode_seek_request(data: bytes) -> SeekRequest:
    obj = loads_object(data, "SeekRequest")
    if "to" not in obj:
        raise TmsInvalidArgumentError('a seek says where to: "to"')
    return SeekRequest(
        start_from_json(obj["to"]),
        _version(obj.get("version")),
        _transaction(obj.get("transaction")),
    )


def decode_write_pointers(data: bytes, what: str) -> list[int]:
    obj = loads_object(data, what)
    raw = obj.get("transactionWritePointers")
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_POINTERS:
        raise TmsInvalidArgumentError(
            f"transactionWritePointers must be a list of 1 to {MAX_POINTERS} write pointers"
        )
    for wp in raw:
        if isinstance(wp, bool) or not isinstance(wp, int) or not 0 < wp < 2**63:
            raise TmsInvalidArgumentError(f"bad transaction write pointer {wp!r}")
    return list(dict.fromkeys(raw))
