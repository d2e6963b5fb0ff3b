"""Subscriptions on the wire and in storage (pure: bytes and JSON objects ⇄ values).

JSON (REST bodies and the stored record alike; bytes base64, ids 40 hex digits)::

    Start        "earliest" | "latest" | {"time": ms} | {"id": "<hex>"}
    Preferences  {"start": Start, "transactional": bool,
                  "filter": {"payloadPrefixes": ["<base64>", ...]} | null}
    State        {"position": "<hex>", "generation": n, "stamp": n, "updated": ms}

Metadata row of the embedded subscription store (table ``s``); the ZooKeeper store's
znode data is the JSON alone (``encode_data``), its version the znode's::

    key    UTF8(namespace ":" topic ":" name)
    value  int64 version || UTF8(JSON {"preferences": Preferences, "state": State},
                                 keys sorted, no spaces)

Transactional position row (table ``c``, under the topic generation's prefix, as
message rows are)::

    key    topic prefix || ASCII(name) ":" || int64 write pointer
    value  0x01 || int64 stamp || position (20 bytes) || int64 written_ms

Names cannot contain ``:``, so one subscription's rows are never a prefix of another's;
big-endian integers, so a subscription's rows sort by write pointer.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.ids import MESSAGE_ID_SIZE, MessageId
from tms.model import TopicId
from tms.subscription import (
    PayloadFilter,
    Preferences,
    Start,
    StartKind,
    SubscriptionData,
    SubscriptionId,
    SubscriptionState,
    Versioned,
)

__all__ = [
    "PositionRow",
    "decode_data",
    "decode_position_key",
    "decode_position_value",
    "decode_record",
    "encode_data",
    "encode_position_value",
    "encode_record",
    "position_key",
    "position_prefix",
    "preferences_from_json",
    "preferences_to_json",
    "start_from_json",
    "start_to_json",
    "subscription_from_key",
    "subscription_key",
    "topic_subscriptions_prefix",
]

_VERSION = struct.Struct(">q")
_ROW = struct.Struct(">bq20sq")
_WP = struct.Struct(">q")
_ROW_KIND = 1


# -- JSON shapes (REST input raises TmsInvalidArgumentError) --------------------------------


def start_to_json(start: Start) -> Any:
    if start.kind is StartKind.TIME:
        return {"time": start.time_ms}
    if start.kind is StartKind.ID:
        assert start.message_id is not None
        return {"id": start.message_id.hex}
    return start.kind.value


def start_from_json(value: Any) -> Start:
    if value in ("earliest", None):
        return Start.earliest()
    if value == "latest":
        return Start.latest()
    if isinstance(value, dict) and len(value) == 1:
        if "time" in value:
            time_ms = value["time"]
            if isinstance(time_ms, bool) or not isinstance(time_ms, int):
                raise TmsInvalidArgumentError("start time must be an integer (ms)")
            return Start.at_time(time_ms)
        if "id" in value and isinstance(value["id"], str):
            return Start.at_id(MessageId.from_hex(value["id"]))
    raise TmsInvalidArgumentError(
        f'a start is "earliest", "latest", {{"time": ms}} or {{"id": "<hex>"}}, not {value!r}'
    )


def preferences_to_json(preferences: Preferences) -> dict[str, Any]:
    flt = preferences.filter
    return {
        "start": start_to_json(preferences.start),
        "transactional": preferences.transactional,
        "filter": None
        if flt is None
        else {"payloadPrefixes": [base64.b64encode(p).decode() for p in flt.prefixes]},
    }


def preferences_from_json(obj: Mapping[str, Any]) -> Preferences:
    """Preferences from a JSON object; absent keys take their defaults."""
    unknown = set(obj) - {"start", "transactional", "filter"}
    if unknown:
        raise TmsInvalidArgumentError(f"unknown preferences: {', '.join(sorted(unknown))}")
    transactional = obj.get("transactional", False)
    if not isinstance(transactional, bool):
        raise TmsInvalidArgumentError("transactional must be true or false")
    return Preferences(
        start_from_json(obj.get("start")), transactional, _filter_from_json(obj.get("filter"))
    )


def _filter_from_json(value: Any) -> PayloadFilter | None:
    if value is None:
        return None
    raw = value.get("payloadPrefixes") if isinstance(value, dict) else None
    if not isinstance(raw, list) or set(value) != {"payloadPrefixes"}:
        raise TmsInvalidArgumentError('a filter is {"payloadPrefixes": ["<base64>", ...]} or null')
    prefixes = []
    for item in raw:
        if not isinstance(item, str):
            raise TmsInvalidArgumentError("payload prefixes are base64 strings")
        try:
            prefixes.append(base64.b64decode(item, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise TmsInvalidArgumentError(f"a payload prefix is not base64: {exc}") from exc
    return PayloadFilter(tuple(prefixes))


def _state_to_json(state: SubscriptionState) -> dict[str, Any]:
    return {
        "position": state.position.hex,
        "generation": state.generation,
        "stamp": state.stamp,
        "updated": state.updated_ms,
    }


# -- the stored record (bad bytes raise TmsCodecError) ---------------------------------------


def subscription_key(sub: SubscriptionId) -> bytes:
    return f"{sub.topic.namespace}:{sub.topic.topic}:{sub.name}".encode()


def topic_subscriptions_prefix(topic: TopicId) -> bytes:
    """The prefix of every subscription record of ``topic``."""
    return f"{topic.namespace}:{topic.topic}:".encode()


def subscription_from_key(key: bytes) -> SubscriptionId:
    try:
        namespace, topic, name = key.decode().split(":")
        return SubscriptionId(TopicId(namespace, topic), name)
    except (UnicodeDecodeError, ValueError) as exc:
        raise TmsCodecError(f"not a subscription key: {key!r}") from exc


def encode_data(data: SubscriptionData) -> bytes:
    """The record's JSON body, without a version (the ZooKeeper store's znode data: the
    znode's own version is the record's): ``{"preferences":…,"state":…}``, keys sorted,
    no spaces."""
    state = json.dumps(_state_to_json(data.state), sort_keys=True, separators=(",", ":"))
    return f'{{"preferences":{_preferences_body(data.preferences)},"state":{state}}}'.encode()


@lru_cache(maxsize=4096)
def _preferences_body(preferences: Preferences) -> str:
    """The preferences' part of a record body: every commit writes a new state under the
    same preferences, so it is encoded once per preferences, not per commit."""
    return json.dumps(preferences_to_json(preferences), sort_keys=True, separators=(",", ":"))


def encode_record(data: SubscriptionData, version: int) -> bytes:
    return _VERSION.pack(version) + encode_data(data)


@lru_cache(maxsize=4096)
def decode_record(value: bytes) -> Versioned:
    """The record of ``value``; the values are frozen, so one decoded record is shared by
    every read of the same bytes (a hot subscription's record is decoded once per change,
    not per request)."""
    if len(value) < _VERSION.size:
        raise TmsCodecError(f"subscription record of {len(value)} bytes")
    (version,) = _VERSION.unpack_from(value)
    return Versioned(decode_data(value[_VERSION.size :]), int(version))


@lru_cache(maxsize=4096)
def decode_data(value: bytes) -> SubscriptionData:
    """The record of ``encode_data``'s bytes (shared between reads, as ``decode_record``)."""
    try:
        body = json.loads(value)
        state = body["state"]
        return SubscriptionData(
            preferences_from_json(body["preferences"]),
            SubscriptionState(
                MessageId.from_hex(state["position"]),
                int(state["generation"]),
                int(state["stamp"]),
                int(state["updated"]),
            ),
        )
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise TmsCodecError(f"bad subscription record: {exc}") from exc


# -- transactional position rows -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PositionRow:
    """A position written under a transaction's write pointer (``tms.positions``)."""

    write_pointer: int
    stamp: int
    position: MessageId
    written_ms: int


def position_prefix(topic_prefix: bytes, name: str) -> bytes:
    """The prefix of one subscription's rows in a topic generation."""
    return topic_prefix + name.encode("ascii") + b":"


def position_key(topic_prefix: bytes, name: str, write_pointer: int) -> bytes:
    return position_prefix(topic_prefix, name) + _WP.pack(write_pointer)


def decode_position_key(key: bytes, topic_prefix: bytes) -> tuple[str, int]:
    """(name, write pointer) of a row of the topic generation ``topic_prefix``."""
    rest = key[len(topic_prefix) :]
    if not key.startswith(topic_prefix) or len(rest) < 10 or rest[-9:-8] != b":":
        raise TmsCodecError(f"not a position key: {key!r}")
    return rest[:-9].decode("ascii"), int(_WP.unpack_from(rest, len(rest) - 8)[0])


def encode_position_value(stamp: int, position: MessageId, written_ms: int) -> bytes:
    return _ROW.pack(_ROW_KIND, stamp, position.to_bytes(), written_ms)


def decode_position_value(write_pointer: int, value: bytes) -> PositionRow:
    if len(value) != _ROW.size or value[0] != _ROW_KIND:
        raise TmsCodecError(f"bad position value of {len(value)} bytes")
    _kind, stamp, position, written_ms = _ROW.unpack(value)
    assert len(position) == MESSAGE_ID_SIZE
    return PositionRow(write_pointer, int(stamp), MessageId.from_bytes(position), int(written_ms))
