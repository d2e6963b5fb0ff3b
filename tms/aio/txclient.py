"""``AsyncTxClient``: the calls of a transaction's life (start, canCommit, commit, abort,
invalidate) over Tephra's Thrift protocol, on an asyncio event loop.

Why its own client rather than ``ThriftTxClient`` on a worker thread: each call would
then cost two thread hand-offs (and the GIL's switch interval when the loop is busy)
around a ~0.2 ms round trip, and a producer in a transaction makes three of them. This
one writes the calls with the hand codecs of ``txn.rpc.wire`` (the same bytes
``ThriftTxClient`` sends) and pipelines them on one connection: the server answers a
connection's calls in order, so replies are matched to a queue of futures.

Errors are ``txn``'s: the declared Thrift exceptions as ``ThriftTxClient`` maps them
(``txn.rpc.convert``), ``TxServiceError`` for an application exception, and
``TxServiceUnavailableError`` when the server cannot be reached or the connection breaks
(a call whose answer was lost may have taken effect). A call on a broken connection
reconnects first; nothing is retried after it was sent.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Collection
from typing import Any, cast

from thriftpy2.thrift import TApplicationException, TException

from txn.errors import TxServiceError, TxServiceUnavailableError
from txn.rpc import wire
from txn.rpc.client import default_client_id
from txn.rpc.convert import from_thrift, to_thrift
from txn.rpc.endpoints import parse_address
from txn.rpc.errors import error_from_thrift
from txn.rpc.idl import tephra
from txn.transaction import Transaction

__all__ = ["AsyncTxClient"]

_S = tephra.TTransactionServer
_START = b"startShortClientId"
_START_TIMEOUT = b"startShortWithClientIdAndTimeOut"
_MAX_FRAME = 64 * 1024 * 1024


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: collections.deque[asyncio.Future[bytes]] = collections.deque()
        self.dead: str | None = None
        self._buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if not 0 < size <= _MAX_FRAME:
                self.fail(f"bad frame length {size}")
                return
            if len(buf) - pos - 4 < size:
                break
            body = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            if not self.waiting:
                self.fail("a reply nobody asked for")
                return
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(body)
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(f"the connection was lost: {exc or 'closed by the server'}")

    def fail(self, reason: str) -> None:
        if self.dead is None:
            self.dead = reason
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(TxServiceUnavailableError(reason))
        if self.transport is not None:
            self.transport.close()


class AsyncTxClient:
    """See the module docstring. Use from one event loop."""

    def __init__(
        self,
        address: str | tuple[str, int],
        *,
        client_id: str | None = None,
        timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.address = parse_address(address)
        self.client_id = client_id or default_client_id()
        self._timeout = timeout_s
        self._ssl = ssl_context
        self._conn: _Connection | None = None
        self._connecting = asyncio.Lock()
        self._start_frame = wire.call_frame(_START, wire.encode_client_id_args(self.client_id))

    async def _connection(self) -> _Connection:
        async with self._connecting:
            if self._conn is None or self._conn.dead is not None:
                host, port = self.address
                loop = asyncio.get_running_loop()
                try:
                    _, conn = await asyncio.wait_for(
                        loop.create_connection(
                            _Connection,
                            host,
                            port,
                            ssl=self._ssl,
                            server_hostname=host if self._ssl is not None else None,
                        ),
                        self._timeout,
                    )
                except (OSError, TimeoutError, ssl.SSLError) as exc:
                    raise TxServiceUnavailableError(
                        f"cannot connect to the transaction server at {host}:{port}: {exc!r}"
                    ) from exc
                self._conn = conn
            return self._conn

    async def _exchange(self, frame: bytes) -> bytes:
        """Send one framed call; the body of its reply."""
        conn = await self._connection()
        assert conn.transport is not None
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        conn.waiting.append(future)
        conn.transport.write(frame)
        try:
            return await asyncio.wait_for(future, self._timeout)
        except TimeoutError as exc:
            conn.fail(f"no reply in {self._timeout} s")  # later replies would be misplaced
            raise TxServiceUnavailableError(f"no reply in {self._timeout} s") from exc

    @staticmethod
    def _decode(method: str, body: bytes) -> Any:
        try:
            return wire.decode_reply(body, method, getattr(_S, method + "_result")())
        except TApplicationException as exc:
            raise TxServiceError(f"{method}: {exc}") from exc
        except TException as exc:
            mapped = error_from_thrift(exc)
            if mapped is None:
                raise TxServiceError(f"{method}: unexpected {exc!r}") from exc
            raise mapped from exc

    async def _call(self, method: str, *args: Any) -> Any:
        """A call the generic way (thriftpy2's codec)."""
        frame = wire.encode_call(method, getattr(_S, method + "_args")(*args))
        return self._decode(method, await self._exchange(frame))

    async def _void(self, name: bytes, frame: bytes) -> None:
        body = await self._exchange(frame)
        pos = wire.result_offset(body, name)
        if pos is None or not wire.is_void_success(body, pos):
            self._decode(name.decode(), body)

    async def start_short(self, timeout_s: int | None = None) -> Transaction:
        if timeout_s is None:
            name, frame = _START, self._start_frame
        else:
            name = _START_TIMEOUT
            args = wire.encode_client_id_timeout_args(self.client_id, timeout_s)
            frame = wire.call_frame(name, args)
        body = await self._exchange(frame)
        pos = wire.result_offset(body, name)
        tx = None if pos is None else wire.transaction_result(body, pos)
        return tx if tx is not None else from_thrift(self._decode(name.decode(), body))

    async def can_commit_or_throw(self, tx: Transaction, changes: Collection[bytes]) -> None:
        args = wire.encode_can_commit_args(tx.transaction_id, list({bytes(c) for c in changes}))
        await self._void(b"canCommitOrThrow", wire.call_frame(b"canCommitOrThrow", args))

    async def commit_or_throw(self, tx: Transaction) -> None:
        args = wire.encode_commit_args(tx.transaction_id, tx.write_pointer)
        await self._void(b"commitOrThrow", wire.call_frame(b"commitOrThrow", args))

    async def abort(self, tx: Transaction) -> None:
        await self._call("abortTx", to_thrift(tx))

    async def invalidate(self, tx_id: int) -> bool:
        return bool(await self._call("invalidateTx", tx_id))

    async def status(self) -> str:
        return str(await self._call("status"))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.fail("the client closed the connection")
            self._conn = None

    async def __aenter__(self) -> AsyncTxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
