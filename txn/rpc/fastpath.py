"""The calls of a transaction's life without the generic Thrift machinery.

``FastCalls.table`` maps a method name (bytes, as on the wire) to a function taking the
call's seqid bytes, the frame and where its arguments start, and returning the reply
slot ``(log ticket, framed reply)`` — or None when the arguments are not in the
standard layout, in which case the server decodes and runs the call the generic way
(``TephraHandler.handle``). Same operations, same answers, same error mapping
(``TephraHandler.failure``); only decoding and encoding are by hand (``txn.rpc.wire``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from txn.operations import Durable
from txn.rpc import wire
from txn.rpc.handler import TephraHandler
from txn.transaction import Transaction

__all__ = ["FastCall", "FastCalls"]

FastCall = Callable[[bytes, bytes, int], tuple[int, bytes] | None]
_Run = Callable[[bytes, int], Durable[Any] | None]
_Encode = Callable[[bytes, bytes, Any], bytes]


def _void(head: bytes, seqid: bytes, _value: object) -> bytes:
    return wire.void_reply(head, seqid)


class FastCalls:
    """The hot calls of a ``TephraHandler`` (see the module docstring)."""

    def __init__(self, handler: TephraHandler) -> None:
        self._handler = handler
        self._p = handler.pipeline
        tx = wire.transaction_reply
        self.table: dict[bytes, FastCall] = {
            name.encode(): self._call(name, run, encode)
            for name, run, encode in (
                ("startShort", self._start_short, tx),
                ("startLong", self._start_long, tx),
                ("startShortClientId", self._start_short_client_id, tx),
                ("startShortWithTimeout", self._start_short_timeout, tx),
                ("startShortWithClientIdAndTimeOut", self._start_short_client_id_timeout, tx),
                ("canCommitOrThrow", self._can_commit, _void),
                ("commitOrThrow", self._commit, _void),
            )
        }

    def _call(self, api: str, run: _Run, encode: _Encode) -> FastCall:
        head = wire.reply_head(api.encode())

        def call(seqid: bytes, frame: bytes, pos: int) -> tuple[int, bytes] | None:
            try:
                d = run(frame, pos)  # the decoders never raise: this is the operation
            except Exception as exc:
                reply = self._handler.crashed(api, exc)
                number = int.from_bytes(seqid, "big", signed=True)
                return reply.ticket, wire.encode_message(api, number, reply.result)
            return None if d is None else (d.ticket, encode(head, seqid, d.value))

        return call

    # Each: the operation's Durable, or None (without running it) when the arguments
    # are not in the standard layout.

    def _start_short(self, frame: bytes, pos: int) -> Durable[Transaction] | None:
        return self._p.start_short() if wire.no_args(frame, pos) else None

    def _start_long(self, frame: bytes, pos: int) -> Durable[Transaction] | None:
        return self._p.start_long() if wire.no_args(frame, pos) else None

    def _start_short_client_id(self, frame: bytes, pos: int) -> Durable[Transaction] | None:
        client_id = wire.client_id_args(frame, pos)
        return None if client_id is None else self._p.start_short(None, client_id)

    def _start_short_timeout(self, frame: bytes, pos: int) -> Durable[Transaction] | None:
        timeout = wire.timeout_args(frame, pos)
        return None if timeout is None else self._p.start_short(timeout)

    def _start_short_client_id_timeout(self, frame: bytes, pos: int) -> Durable[Transaction] | None:
        args = wire.client_id_timeout_args(frame, pos)
        return None if args is None else self._p.start_short(args[1], args[0])

    def _can_commit(self, frame: bytes, pos: int) -> Durable[None] | None:
        args = wire.can_commit_args(frame, pos)
        return None if args is None else self._p.can_commit(*args)

    def _commit(self, frame: bytes, pos: int) -> Durable[None] | None:
        args = wire.commit_args(frame, pos)
        return None if args is None else self._p.commit(*args)
