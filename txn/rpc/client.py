"""``ThriftTxClient``: a ``TxClient`` over Tephra's Thrift protocol.

Talks to ``txn serve`` or to a Tephra transaction server. Connections are pooled (up to
``pool_size``, one call at a time each); a call that fails in transport, or with an
internal server error, discards its connection and is retried per the retry strategy
(default: Tephra's backoff). Declared Thrift exceptions map to ``txn`` errors in
``txn.rpc.errors`` and are never retried; when retries run out the call raises
``TxServiceUnavailableError``.

Calls that are not idempotent (start, commit, abort) may have taken effect on the server
before a transport failure: a retried commit can answer "not in progress" for a commit
that did happen, as with Tephra's own client.

A pooled connection idle for a second or more is checked before it is used again: one
the server has closed (``txn serve`` closes idle connections after ``idle_timeout_s``) is
replaced by a new one without costing a retry.

Each connection is a plain socket speaking framed binary Thrift, or a TLS socket with
``tls`` (``txn.rpc.tls.ClientTls``: the server's CA, and this client's certificate for a
server that requires one). A server certificate that does not verify raises
``TxServiceError`` at once (no retry). The calls of a
transaction's life (start, canCommit, commit) are encoded and their successful answers
decoded by hand (``txn.rpc.wire``); every other call, and every answer that is not a
plain success, goes through thriftpy2's generic codec. A reply that cannot be decoded
breaks its connection (discarded, retried like a transport error).
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException, TException
from thriftpy2.transport import TTransportException

from txms_common.retry import RetryStrategy, RetryWithBackoff
from txn.config import DEFAULT_PORT
from txn.errors import (
    TransactionNotInProgressError,
    TxServiceError,
    TxServiceUnavailableError,
)
from txn.rpc import wire
from txn.rpc.convert import from_thrift, to_thrift
from txn.rpc.endpoints import Address, Endpoints, endpoints, parse_address
from txn.rpc.errors import error_from_thrift
from txn.rpc.idl import tephra
from txn.rpc.tls import ClientTls
from txn.state import WritePointerState
from txn.transaction import Transaction

__all__ = ["ThriftTxClient", "default_client_id", "parse_address"]

_TRANSPORT_ERRORS = (TTransportException, TProtocolException, OSError, EOFError, socket.timeout)
S = tephra.TTransactionServer
_RETRYABLE_APP_ERRORS = frozenset(
    {TApplicationException.INTERNAL_ERROR, TApplicationException.UNKNOWN}
)


def default_client_id() -> str:
    """``pid@host``, as a JVM names itself."""
    return f"{os.getpid()}@{socket.gethostname()}"


class _Pool:
    """Up to ``size`` connections, the most recently used first; callers wait up to
    ``obtain_timeout_s`` for one to be released (or discarded, making room for a new one)."""

    def __init__(self, factory: Callable[[], Any], size: int, obtain_timeout_s: float) -> None:
        self._factory = factory
        self._idle: list[Any] = []
        self._size = size
        self._created = 0
        self._cond = threading.Condition(threading.Lock())
        self._timeout = obtain_timeout_s

    def obtain(self) -> Any:
        deadline: float | None = None
        with self._cond:
            while True:
                while not self._idle and self._created >= self._size:
                    if deadline is None:
                        deadline = time.monotonic() + self._timeout
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TxServiceUnavailableError(
                            f"no connection free after {self._timeout} s ({self._size} in use)"
                        )
                    self._cond.wait(remaining)
                if not self._idle:
                    break
                conn = self._idle.pop()
                if not conn.stale():
                    return conn
                self._created -= 1  # closed by the server meanwhile: make a new one
                with contextlib.suppress(Exception):
                    conn.close()
            self._created += 1
        try:
            return self._factory()
        except BaseException:
            with self._cond:
                self._created -= 1
                self._cond.notify()
            raise

    def release(self, conn: Any) -> None:
        with self._cond:
            self._idle.append(conn)
            self._cond.notify()

    def discard(self, conn: Any) -> None:
        with self._cond:
            self._created -= 1
            self._cond.notify()
        with contextlib.suppress(Exception):  # it may be broken already
            conn.close()

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
        for conn in idle:
            self.discard(conn)


class ThriftTxClient:
    """See the module docstring and ``txn.client.TxClient``."""

    def __init__(
        self,
        address: str | Address | Sequence[str | Address] | Endpoints = ("127.0.0.1", DEFAULT_PORT),
        *,
        client_id: str | None = None,
        timeout_s: float = 30.0,
        pool_size: int = 50,
        obtain_timeout_s: float = 3.0,
        retry: RetryStrategy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        tls: ClientTls | None = None,
    ) -> None:
        self._endpoints = endpoints(address)
        self._tls_context = None if tls is None else tls.context()
        self._tls_hostname = None if tls is None else tls.server_hostname
        self.client_id = client_id or default_client_id()
        self._timeout_s = timeout_s
        self._start_frame = wire.call_frame(
            b"startShortClientId", wire.encode_client_id_args(self.client_id)
        )
        self._retry = retry if retry is not None else RetryWithBackoff()
        self._sleep = sleep
        self._pool = _Pool(self._connect, pool_size, obtain_timeout_s)
        self._tephra_only = False  # the server lacks the txms extensions

    @property
    def address(self) -> Address:
        """The server this client connects to now (for a ``zk://`` client, the leader;
        may wait up to the call timeout for one to be published)."""
        return self._endpoints.current(self._timeout_s)

    @property
    def host(self) -> str:
        return self.address[0]

    @property
    def port(self) -> int:
        return self.address[1]

    def _connect(self) -> _Connection:
        host, port = self._endpoints.current(self._timeout_s)
        tls = None
        if self._tls_context is not None:
            tls = (self._tls_context, self._tls_hostname or host)
        try:
            return _Connection(host, port, self._timeout_s, tls)
        except ssl.SSLCertVerificationError as exc:
            raise TxServiceError(
                f"the transaction server at {host}:{port} failed TLS verification: "
                f"{exc.verify_message}"
            ) from exc
        except _TRANSPORT_ERRORS as exc:
            self._endpoints.failed((host, port))
            raise _ConnectError(exc, (host, port)) from exc

    def _call(self, method: str, *args: Any) -> Any:
        """Call ``method`` the generic way."""
        args_struct = getattr(S, method + "_args")(*args)
        frame = wire.encode_call(method, args_struct)
        result_type = getattr(S, method + "_result")
        return self._exchange(
            method, frame, lambda body: wire.decode_reply(body, method, result_type())
        )

    def _exchange(
        self,
        method: str,
        frame: bytes,
        decode: Callable[[bytes], Any],
        outcome: _Outcome | None = None,
    ) -> Any:
        """Send ``frame`` on a pooled connection and ``decode`` the reply's body, with the
        retry and error mapping of the module docstring. ``outcome`` learns whether an
        earlier attempt's answer was lost (the call may have taken effect)."""
        delays = self._retry.delays()
        while True:
            failure: BaseException
            failed_at: Address | None = None
            try:
                conn = self._pool.obtain()
            except _ConnectError as exc:
                failure = exc.cause
                failed_at = exc.address
            except TxServiceUnavailableError as exc:
                failure = exc  # no leader published (yet)
            else:
                failed_at = conn.address
                try:
                    result = decode(conn.exchange(frame))
                except TApplicationException as exc:
                    self._pool.discard(conn)
                    if exc.type not in _RETRYABLE_APP_ERRORS:
                        raise TxServiceError(f"{method}: {exc}") from exc
                    failure = exc  # e.g. a manager that failed or was deposed: not applied
                except _TRANSPORT_ERRORS as exc:
                    self._pool.discard(conn)
                    self._endpoints.failed(conn.address)
                    if outcome is not None:
                        outcome.unknown = True  # sent, answer lost: it may have been applied
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
                    f"transaction service at {self._endpoints.describe()} failed: {failure!r}"
                ) from failure
            if delay > 0 and not (
                failed_at is not None and self._endpoints.pause(failed_at, delay)
            ):
                self._sleep(delay)

    # -- TxClient ---------------------------------------------------------------------

    def start_short(self, timeout_s: int | None = None) -> Transaction:
        if timeout_s is None:
            name, frame = b"startShortClientId", self._start_frame
        else:
            name = b"startShortWithClientIdAndTimeOut"
            frame = wire.call_frame(
                name, wire.encode_client_id_timeout_args(self.client_id, timeout_s)
            )
        return self._start(name, frame)

    def start_long(self) -> Transaction:
        name = b"startLongClientId"
        return self._start(name, wire.call_frame(name, wire.encode_client_id_args(self.client_id)))

    def _start(self, name: bytes, frame: bytes) -> Transaction:
        method = name.decode()
        result_type = getattr(S, method + "_result")

        def decode(body: bytes) -> Transaction:
            pos = wire.result_offset(body, name)
            tx = None if pos is None else wire.transaction_result(body, pos)
            if tx is not None:
                return tx
            return from_thrift(wire.decode_reply(body, method, result_type()))

        result: Transaction = self._exchange(method, frame, decode)
        return result

    def can_commit_or_throw(self, tx: Transaction, changes: Collection[bytes]) -> None:
        keys = list({bytes(c) for c in changes})
        args = wire.encode_can_commit_args(tx.transaction_id, keys)
        self._void(b"canCommitOrThrow", wire.call_frame(b"canCommitOrThrow", args))

    def commit_or_throw(self, tx: Transaction) -> None:
        """See ``TxClient``. Safe to retry: when an earlier attempt's answer was lost and
        the retry finds the transaction no longer in progress, the outcome is settled by
        a fresh transaction's snapshot — committed if it sees ``tx``'s write pointer as
        visible (an aborted transaction is only aborted by its owner, a timed-out one is
        invalid) — instead of reporting a commit that happened as failed."""
        args = wire.encode_commit_args(tx.transaction_id, tx.write_pointer)
        outcome = _Outcome()
        try:
            self._void(b"commitOrThrow", wire.call_frame(b"commitOrThrow", args), outcome)
        except TransactionNotInProgressError:
            if not outcome.unknown or not self._committed(tx):
                raise

    def _committed(self, tx: Transaction) -> bool:
        """Whether a fresh snapshot sees every write pointer of ``tx`` as committed."""
        probe = self.start_short()
        try:
            return all(
                probe.is_visible(wp) for wp in (tx.transaction_id, *tx.checkpoint_write_pointers)
            )
        finally:
            self.abort(probe)

    def _void(self, name: bytes, frame: bytes, outcome: _Outcome | None = None) -> None:
        method = name.decode()
        result_type = getattr(S, method + "_result")

        def decode(body: bytes) -> None:
            pos = wire.result_offset(body, name)
            if pos is None or not wire.is_void_success(body, pos):
                wire.decode_reply(body, method, result_type())

        self._exchange(method, frame, decode, outcome)

    def abort(self, tx: Transaction) -> None:
        self._call("abortTx", to_thrift(tx))

    def invalidate(self, tx_id: int) -> bool:
        return bool(self._call("invalidateTx", tx_id))

    def checkpoint(self, tx: Transaction) -> Transaction:
        return from_thrift(self._call("checkpoint", to_thrift(tx)))

    def extend_timeout(self, tx_id: int, timeout_s: int) -> int:
        """See ``TransactionManager.extend_timeout`` (an extension: ``txn serve`` only)."""
        return int(self._call("extendTimeout", tx_id, timeout_s))

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

    def report_prune_upper_bound(self, participant: str, bound: int) -> None:
        """Report a pruning participant's bound (a txms extension, ``txn.prune``).
        Raises ``InvalidArgumentError`` when the server does not know ``participant`` or
        does not prune."""
        self._call("reportPruneUpperBound", participant, bound)

    def write_pointer_state(
        self, pointers: Iterable[int] = (), durable: bool = False
    ) -> WritePointerState:
        asked = [int(p) for p in pointers]
        if not self._tephra_only:
            try:  # durable is left out unless asked: the same call as before the field
                r = self._call("writePointerState", asked, True if durable else None)
            except TxServiceError as exc:
                cause = exc.__cause__
                if not (
                    isinstance(cause, TApplicationException)
                    and cause.type == TApplicationException.UNKNOWN_METHOD
                ):
                    raise
                self._tephra_only = True  # Tephra's server: the fallback from now on
            else:
                return WritePointerState(
                    r.writePointer or 0, frozenset(r.inProgress or ()), frozenset(r.invalid or ())
                )
        # Tephra's own calls: a new transaction's snapshot holds what is asked (its id is
        # newer than every pointer issued before it); then forget it.
        tx = self.start_short()
        try:
            return WritePointerState(
                tx.write_pointer,
                frozenset(tx.in_progress),
                frozenset(p for p in asked if tx.is_invalid(p)),
            )
        finally:
            self.abort(tx)

    def close(self) -> None:
        self._pool.close()
        self._endpoints.close()

    def __enter__(self) -> ThriftTxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Connection:
    """One socket to the server; one call at a time."""

    _CHECK_AFTER_S = 1.0

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float,
        tls: tuple[ssl.SSLContext, str] | None = None,
    ) -> None:
        self.address = (host, port)
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls[0].wrap_socket(sock, server_hostname=tls[1])
            except BaseException:
                sock.close()
                raise
        self._sock = sock
        self._timeout_s = timeout_s
        self._used = time.monotonic()

    def stale(self) -> bool:
        """Unusable after a rest: the server closed it (or sent something unasked)."""
        if time.monotonic() - self._used < self._CHECK_AFTER_S:
            return False
        sock = self._sock
        try:
            sock.setblocking(False)
            try:
                sock.recv(1)
            finally:
                sock.settimeout(self._timeout_s)
        except (BlockingIOError, ssl.SSLWantReadError):
            return False  # nothing to read: alive
        except OSError:
            return True
        return True  # end of stream, or bytes nobody asked for

    def exchange(self, frame: bytes) -> bytes:
        """Send one framed call; return the body of the one reply frame."""
        self._used = time.monotonic()
        sock = self._sock
        sock.sendall(frame)
        data = sock.recv(65536)
        while len(data) < 4:
            data += self._more()
        size = int.from_bytes(data[:4], "big", signed=True)
        if size <= 0:
            raise TTransportException(TTransportException.UNKNOWN, f"bad frame length {size}")
        if len(data) >= size + 4:
            if len(data) > size + 4:
                raise TTransportException(TTransportException.UNKNOWN, "bytes after the reply")
            return data[4:]
        chunks = [data[4:]]
        missing = size + 4 - len(data)
        while missing > 0:
            chunk = sock.recv(min(missing, 1 << 20))
            if not chunk:
                raise EOFError("the server closed the connection")
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    def _more(self) -> bytes:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise EOFError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self._sock.close()


class _ConnectError(Exception):
    """Connecting failed (internal: retried like any transport error)."""

    def __init__(self, cause: BaseException, address: Address) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.address = address


class _Outcome:
    """Whether a call's answer was lost on some attempt (internal)."""

    unknown = False
