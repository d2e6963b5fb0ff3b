"""Engines: which implementation keeps the manager's state and log, and serves it.

* ``python``: ``txn.machine.TxStateMachine``, ``txn.persist.wal.WriteAheadLog`` (or
  ``txn.durability.NullLog`` without storage) and ``txn.rpc.server.ThriftServer``;
* ``native``: the same contracts compiled from C (``txn.native``): the state, the log and
  a Thrift server whose hot calls never enter Python. Built by the install when a C
  compiler is present.

``auto`` (the default) means the process default set by the composition root
(``set_default``: ``txn serve`` and the test suite read the ``TXN_ENGINE`` environment
variable), which is itself ``auto`` unless set: native when built, else Python. A
configuration asks for one with ``[txn] engine``. Both give the same answers and write the
same files; only their speed differs (docs/txn.md, "The native engine").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from txn import native
from txn.durability import DurableLog, NullLog
from txn.errors import InvalidArgumentError
from txn.machine import StateMachine, TxStateMachine
from txn.persist.store import TransactionStateStore
from txn.persist.wal import WriteAheadLog

__all__ = ["ENGINE_NAMES", "Engine", "StateLock", "resolve", "set_default"]

ENGINE_NAMES = ("auto", "native", "python")
_default = "auto"


class StateLock(Protocol):
    """The manager's state lock: what ``threading.Lock`` offers (not reentrant)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def locked(self) -> bool: ...

    def __enter__(self) -> bool: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...


@dataclass(frozen=True)
class Engine:
    """One engine (see the module docstring)."""

    name: str

    @property
    def native(self) -> bool:
        return self.name == "native"

    def new_machine(self) -> StateMachine:
        if self.native:
            from txn.native.machine import NativeStateMachine  # noqa: PLC0415 - built or not

            return NativeStateMachine()
        return TxStateMachine()

    def new_lock(self) -> StateLock:
        """The manager's state lock: on the native engine a C lock that its server's hot
        calls take without calling into Python (``txn.native._core.StateLock``)."""
        if self.native:
            from txn.native._core import StateLock as NativeStateLock  # noqa: PLC0415

            return NativeStateLock()
        return threading.Lock()

    def new_log(self, store: TransactionStateStore | None, slow_sync_s: float) -> DurableLog:
        if self.native:
            from txn.native.log import NativeLog  # noqa: PLC0415 - built or not

            return NativeLog(store, slow_sync_s=slow_sync_s)
        if store is None:
            return NullLog()
        return WriteAheadLog(store, slow_sync_s=slow_sync_s)


def _check(name: str) -> str:
    if name not in ENGINE_NAMES:
        raise InvalidArgumentError(f"engine must be one of {', '.join(ENGINE_NAMES)}: {name!r}")
    return name


def set_default(name: str) -> None:
    """What ``auto`` means in this process (composition roots only)."""
    global _default
    _default = _check(name)


def resolve(name: str = "auto") -> Engine:
    """The engine ``name`` asks for. Raises ``InvalidArgumentError`` for an unknown name,
    or for ``native`` when the extension was not built."""
    name = _check(name)
    if name == "auto":
        name = _default
    if name == "auto":
        name = "native" if native.AVAILABLE else "python"
    if name == "native" and not native.AVAILABLE:
        raise InvalidArgumentError(f"no native engine: {native.UNAVAILABLE_REASON}")
    return Engine(name)
