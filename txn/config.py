"""Configuration of the transaction manager and server: typed, validated, frozen, built
once at the composition root. Defaults are Tephra's (``TxConstants``) unless noted."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any

from txn.errors import InvalidArgumentError

__all__ = ["DEFAULT_PORT", "ClientIdRetention", "ServerConfig", "TxConfig"]

DEFAULT_PORT = 15165
_INT_MAX = 2**31 - 1


class ClientIdRetention(enum.Enum):
    """How long a transaction's client id is kept (``data.tx.retain.client.id``)."""

    OFF = "OFF"
    """Never stored."""
    ACTIVE = "ACTIVE"
    """Stored while the transaction is in progress (logged on timeout and invalidation)."""
    COMMITTED = "COMMITTED"
    """Also kept with committed change sets, so conflicts name the winner."""


@dataclass(frozen=True)
class TxConfig:
    """Transaction-manager settings. Durations are whole seconds unless the name says."""

    default_timeout_s: int = 30
    long_timeout_s: int = 86_400
    max_timeout_s: int = _INT_MAX
    max_lifetime_s: int = 90_000
    """No transaction may write for longer than this; truncation relies on it."""
    cleanup_interval_s: float = 10.0
    """How often timed-out transactions are invalidated; <= 0 disables the thread."""
    snapshot_interval_s: float = 300.0
    """How often a snapshot is written and the log rolled; <= 0 disables the thread
    (a snapshot is still written at clean shutdown)."""
    snapshot_retain: int = 10
    changeset_count_limit: int = _INT_MAX
    changeset_count_warn: int = _INT_MAX
    changeset_size_limit: int = 2**63 - 1
    changeset_size_warn: int = 2**63 - 1
    retain_client_id: ClientIdRetention = ClientIdRetention.COMMITTED
    long_timeout_tolerance_ms: int = 10_000
    slow_sync_s: float = 1.0
    prune_enable: bool = False
    """Run invalid-list pruning every ``prune_interval_s`` (``txn.prune``)."""
    prune_interval_s: float = 21_600.0
    prune_grace_s: int = 86_400
    prune_participants: tuple[str, ...] = ()
    """Names of pruning participants in other processes: each must report its bound
    (``reportPruneUpperBound``) since the server started before anything is pruned."""
    engine: str = "auto"
    """``native``, ``python`` or ``auto`` (``txn.engine``): who keeps the state and log and
    serves them. Same answers and files either way."""

    def __post_init__(self) -> None:
        positive = ("default_timeout_s", "long_timeout_s", "max_timeout_s", "max_lifetime_s")
        for name in positive:
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"{name} must be positive, got {getattr(self, name)}")
        if self.default_timeout_s > self.max_timeout_s:
            raise InvalidArgumentError("default_timeout_s must not exceed max_timeout_s")
        if self.snapshot_retain < 1:
            raise InvalidArgumentError("snapshot_retain must be at least 1")
        for name in ("changeset_count_limit", "changeset_size_limit", "prune_grace_s"):
            if getattr(self, name) < 0:
                raise InvalidArgumentError(f"{name} must not be negative")
        if self.prune_enable and self.prune_interval_s <= 0:
            raise InvalidArgumentError("prune_interval_s must be positive")
        names: object = self.prune_participants
        if not isinstance(names, tuple) or not all(isinstance(n, str) and n for n in names):
            raise InvalidArgumentError("prune_participants must be a list of non-empty names")
        if len(set(names)) != len(names):
            raise InvalidArgumentError("prune_participants names a participant twice")
        if self.engine not in ("auto", "native", "python"):
            raise InvalidArgumentError(f"engine must be auto, native or python: {self.engine!r}")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> TxConfig:
        """Build from a mapping (e.g. a TOML table); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidArgumentError(f"unknown transaction settings: {', '.join(unknown)}")
        converted = dict(values)
        if isinstance(converted.get("prune_participants"), list):
            converted["prune_participants"] = tuple(converted["prune_participants"])
        if "retain_client_id" in converted:
            try:
                converted["retain_client_id"] = ClientIdRetention(
                    str(converted["retain_client_id"]).upper()
                )
            except ValueError as exc:
                raise InvalidArgumentError(f"bad retain_client_id: {exc}") from exc
        return cls(**converted)


@dataclass(frozen=True)
class ServerConfig:
    """Thrift server settings."""

    host: str = "127.0.0.1"
    """Tephra binds 0.0.0.0; we bind loopback unless told otherwise (Tephra's protocol has
    no authentication: use the TLS settings to require client certificates)."""
    port: int = DEFAULT_PORT
    tls_cert: str | None = None
    """Serve TLS with this certificate (PEM; with ``tls_key``). Off: plain Thrift, which
    Tephra's own client speaks."""
    tls_key: str | None = None
    tls_client_ca: str | None = None
    """With TLS: require a client certificate signed by this CA (PEM) — the
    authentication (``txn.rpc.tls``)."""
    max_frame_bytes: int = 16 * 1024 * 1024
    """Largest frame accepted (Tephra's ``maxReadBufferBytes``)."""
    max_pending_frame_bytes: int = 64 * 1024 * 1024
    """Memory for unfinished frames across all connections (``txn.rpc.limits``)."""
    frame_timeout_s: float = 30.0
    """A frame begun must be complete within this time; <= 0: no limit."""
    idle_timeout_s: float = 600.0
    """Connections silent this long with nothing outstanding are closed; <= 0: never."""
    offload_frame_bytes: int = 64 * 1024
    """Frames at least this large are decoded and run on a worker thread."""
    drain_timeout_s: float = 30.0
    sync_helper: bool = True
    """fdatasync the log in a helper process while the event loop goes on serving
    (``txn.persist.syncer``), instead of on the loop itself."""
    sync_helpers: int = 1
    """Helper processes, i.e. log syncs in flight at once (with ``sync_helper``). More
    than one pipelines the syncs: worth it on disks that complete concurrent flushes
    faster; on the 2-vCPU benchmark VM it was neutral (docs/benchmarks.md)."""
    commit_delay_us: int = 200
    """Hold a flush back up to this long for the calls of recently answered connections
    (``txn.rpc.server``, "Commit delay"); 0 flushes at once. 200 us made 16 clients in
    step 19-25 % faster on the benchmark VM, a lone client no slower."""
    send_thread: bool = False
    """Native server only: a second thread sends the replies a flush releases to four or
    more connections while the loop reads on (``txn/native/src/sender.c``). Off: the loop
    sends every reply itself, which did more cycles/s with less CPU on the 2-vCPU
    benchmark VM once the hot path stopped calling into Python (docs/benchmarks.md)."""
    sync_helper_min_edits: int = 8
    """With no sync in flight, batches of fewer edits are synced on the loop even with
    ``sync_helper``: few callers, so the two process wake-ups of a hand-off cost more
    than the overlap saves (docs/benchmarks.md has the measurements behind 8)."""

    def __post_init__(self) -> None:
        _check_types(self)
        if not 0 <= self.port <= 65535:
            raise InvalidArgumentError(f"port must be in 0..65535, got {self.port}")
        if not 1 <= self.sync_helpers <= 16:
            raise InvalidArgumentError(f"sync_helpers must be in 1..16, got {self.sync_helpers}")
        if not 0 <= self.commit_delay_us <= 100_000:
            raise InvalidArgumentError(
                f"commit_delay_us must be in 0..100000, got {self.commit_delay_us}"
            )
        if self.sync_helper_min_edits < 0:
            raise InvalidArgumentError("sync_helper_min_edits must not be negative")
        if self.max_frame_bytes < 1024:
            raise InvalidArgumentError("max_frame_bytes must be at least 1024")
        if self.max_pending_frame_bytes < self.max_frame_bytes:
            raise InvalidArgumentError("max_pending_frame_bytes must be at least max_frame_bytes")
        if self.offload_frame_bytes < 1:
            raise InvalidArgumentError("offload_frame_bytes must be positive")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidArgumentError("tls_cert and tls_key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise InvalidArgumentError("tls_client_ca needs tls_cert and tls_key")


def _check_types(config: ServerConfig) -> None:
    """Every setting has the type its field declares (a TOML file can hold any): a flag is
    a bool, never a truthy string; a count an int, never a bool; seconds an int or float."""
    for f in fields(config):
        value = getattr(config, f.name)
        kind = str(f.type)
        if kind == "bool" and not isinstance(value, bool):
            raise InvalidArgumentError(f"{f.name} must be true or false, got {value!r}")
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArgumentError(f"{f.name} must be an integer, got {value!r}")
        if kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InvalidArgumentError(f"{f.name} must be a number, got {value!r}")
        if kind == "str" and not isinstance(value, str):
            raise InvalidArgumentError(f"{f.name} must be a string, got {value!r}")
        if kind == "str | None" and value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"{f.name} must be a string, got {value!r}")
