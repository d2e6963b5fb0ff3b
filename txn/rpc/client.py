"""``ThriftTxClient``: a ``TxClient`` over Tephra's Thrift protocol.

Talks to ``txn serve`` or to a Tephra transaction server. Connections are pooled (up to
``pool_size``, one call at a time each); a call that fails in transport, or with an
internal server error, discards its connection and is retried per the retry strategy
(default: Tephra's backoff). Declared Thrift exceptions map to ``txn`` errors in
``txn.rpc.convert`` and are never retried; when retries run out the call raises
``TxServiceUnavailableError``.

Calls that are not idempotent (start, commit, abort) may have taken effect on the server
before a transport failure: a retried commit can answer "not in progress" for a commit
that did happen, as with Tephra's own client.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TApplicationException, TException
from thriftpy2.transport import TTransportException
from thriftpy2.transport.framed import TCyFramedTransportFactory  # type: ignore[attr-defined]

from txn.config import DEFAULT_PORT
from txn.errors import InvalidArgumentError, TxServiceError, TxServiceUnavailableError
from txn.rpc.convert import error_from_thrift, from_thrift, to_thrift
from txn.rpc.idl import tephra
from txn.rpc.retry import RetryStrategy, RetryWithBackoff
from txn.transaction import Transaction

__all__ = ["ThriftTxClient", "default_client_id", "parse_address"]

_TRANSPORT_ERRORS = (TTransportException, OSError, EOFError, socket.timeout)
_RETRYABLE_APP_ERRORS = frozenset(
    {TApplicationException.INTERNAL_ERROR, TApplicationException.UNKNOWN}
)


def default_client_id() -> str:
    """``pid@host``, as a JVM names itself."""
    return f"{os.getpid()}@{socket.gethostname()}"


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"``, ``"host"`` or ``(host, port)``."""
    if isinstance(address, tuple):
        return address
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, DEFAULT_PORT
    try:
        return host or "127.0.0.1", int(port)
    except ValueError as exc:
        raise InvalidArgumentError(f"bad address {address!r}") from exc


class _Pool:
    """Up to ``size`` connections; callers wait up to ``obtain_timeout_s`` for one."""

    def __init__(self, factory: Callable[[], Any], size: int, obtain_timeout_s: float) -> None:
        self._factory = factory
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._size = size
        self._created = 0
        self._lock = threading.Lock()
        self._timeout = obtain_timeout_s

    def obtain(self) -> Any:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            create = self._created < self._size
            if create:
                self._created += 1
        if create:
            try:
                return self._factory()
            except BaseException:
                with self._lock:
                    self._created -= 1
                raise
        try:
            return self._idle.get(timeout=self._timeout)
        except queue.Empty as exc:
            raise TxServiceUnavailableError(
                f"no connection free after {self._timeout} s ({self._size} in use)"
            ) from exc

    def release(self, conn: Any) -> None:
        self._idle.put(conn)

    def discard(self, conn: Any) -> None:
        with self._lock:
            self._created -= 1
        with contextlib.suppress(Exception):  # it may be broken already
            conn.close()

    def close(self) -> None:
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return
            self.discard(conn)


class ThriftTxClient:
    """See the module docstring and ``txn.client.TxClient``."""

    def __init__(
        self,
        address: str | tuple[str, int] = ("127.0.0.1", DEFAULT_PORT),
        *,
        client_id: str | None = None,
        timeout_s: float = 30.0,
        pool_size: int = 50,
        obtain_timeout_s: float = 3.0,
        retry: RetryStrategy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.host, self.port = parse_address(address)
        self.client_id = client_id or default_client_id()
        self._timeout_ms = int(timeout_s * 1000)
        self._retry = retry if retry is not None else RetryWithBackoff()
        self._sleep = sleep
        self._pool = _Pool(self._connect, pool_size, obtain_timeout_s)

    def _connect(self) -> Any:
        try:
            return make_client(
                tephra.TTransactionServer,
                self.host,
                self.port,
                timeout=self._timeout_ms,
                trans_factory=TCyFramedTransportFactory(),
                proto_factory=TCyBinaryProtocolFactory(),
            )
        except _TRANSPORT_ERRORS as exc:
            raise _ConnectError(exc) from exc

    def _call(self, method: str, *args: Any) -> Any:
        delays = self._retry.delays()
        while True:
            failure: BaseException
            try:
                conn = self._pool.obtain()
            except _ConnectError as exc:
                failure = exc.cause
            else:
                try:
                    result = getattr(conn, method)(*args)
                except TApplicationException as exc:
                    self._pool.discard(conn)
                    if exc.type not in _RETRYABLE_APP_ERRORS:
                        raise TxServiceError(f"{method}: {exc}") from exc
                    failure = exc
                except _TRANSPORT_ERRORS as exc:
                    self._pool.discard(conn)
                    failure = exc
                except TException as exc:
                    self._pool.release(conn)
                    mapped = error_from_thrift(exc)
                    if mapped is None:
                        raise TxServiceError(f"{method}: unexpected {exc!r}") from exc
                    raise mapped from exc
                except BaseException:
                    self._pool.discard(conn)
                    raise
                else:
                    self._pool.release(conn)
                    return result
            delay = next(delays, None)
            if delay is None:
                raise TxServiceUnavailableError(
                    f"transaction service at {self.host}:{self.port} failed: {failure!r}"
                ) from failure
            if delay > 0:
                self._sleep(delay)

    # -- TxClient ---------------------------------------------------------------------

    def start_short(self, timeout_s: int | None = None) -> Transaction:
        if timeout_s is None:
            return from_thrift(self._call("startShortClientId", self.client_id))
        return from_thrift(
            self._call("startShortWithClientIdAndTimeOut", self.client_id, timeout_s)
        )

    def start_long(self) -> Transaction:
        return from_thrift(self._call("startLongClientId", self.client_id))

    def can_commit_or_throw(self, tx: Transaction, changes: Collection[bytes]) -> None:
        self._call("canCommitOrThrow", tx.transaction_id, {bytes(c) for c in changes})

    def commit_or_throw(self, tx: Transaction) -> None:
        self._call("commitOrThrow", tx.transaction_id, tx.write_pointer)

    def abort(self, tx: Transaction) -> None:
        self._call("abortTx", to_thrift(tx))

    def invalidate(self, tx_id: int) -> bool:
        return bool(self._call("invalidateTx", tx_id))

    def checkpoint(self, tx: Transaction) -> Transaction:
        return from_thrift(self._call("checkpoint", to_thrift(tx)))

    def get_snapshot(self) -> bytes:
        return bytes(self._call("getSnapshot"))

    def status(self) -> str:
        return str(self._call("status"))

    def reset_state(self) -> None:
        self._call("resetState")

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> bool:
        return bool(self._call("truncateInvalidTx", {int(i) for i in tx_ids}).value)

    def truncate_invalid_tx_before(self, time_ms: int) -> bool:
        return bool(self._call("truncateInvalidTxBefore", time_ms).value)

    def invalid_size(self) -> int:
        return int(self._call("invalidTxSize"))

    def prune_now(self) -> None:
        self._call("pruneNow")

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> ThriftTxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ConnectError(Exception):
    """Connecting failed (internal: retried like any transport error)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause
