"""``Dispatcher``: a Thrift frame in, the outcome of its call out — decoding, running it on
the ``TephraHandler`` and encoding the reply, with no connection or event loop in sight.

Both servers use it: the Python server for every frame, the native server for every frame
its C path leaves alone (another method, another layout, an error to map). The hot calls
in the standard layout are decoded and answered by hand (``txn.rpc.fastpath``); anything
else goes through thriftpy2's generic codec.

An outcome is a reply (``(ticket, framed reply)``: send it once ``ticket`` is durable),
a ``Blocking`` call that must run on a worker thread (snapshot, reset, prune), or a str:
why the connection must close (an undecodable message or arguments, or a message that is
not a call). An unknown method is answered ``TApplicationException(UNKNOWN_METHOD)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from thriftpy2.thrift import TApplicationException, TMessageType

from txn.rpc.fastpath import FastCalls
from txn.rpc.handler import BLOCKING, TephraHandler
from txn.rpc.idl import tephra
from txn.rpc.wire import encode_message, parse_call, reading

__all__ = ["Blocking", "Dispatcher", "Outcome"]

_CALL = TMessageType.CALL
_ONEWAY = TMessageType.ONEWAY


@dataclass(frozen=True, slots=True)
class Blocking:
    """A decoded call that must run on a worker thread."""

    api: str
    seqid: int
    args: Any


Outcome = tuple[int, bytes] | Blocking | str


class Dispatcher:
    """See the module docstring. Thread-safe (the handler's operations are)."""

    def __init__(self, handler: TephraHandler) -> None:
        self.handler = handler
        self.methods = handler.methods
        """The methods served (a test narrows it to emulate an older server)."""
        self._fast = FastCalls(handler).table
        self._service = tephra.TTransactionServer

    def execute(self, frame: bytes, *, on_loop: bool) -> Outcome:
        """Decode ``frame`` and run its call (a ``BLOCKING`` one only off the loop)."""
        call = parse_call(frame)
        if call is not None:
            fast = self._fast.get(call[0])
            if fast is not None:
                answer = fast(call[1], frame, call[2])
                if answer is not None:
                    return answer
        proto = reading(frame)
        try:
            api, mtype, seqid = proto.read_message_begin()
        except Exception as exc:
            return f"undecodable message header: {exc!r}"
        if mtype not in (_CALL, _ONEWAY):
            return f"message type {mtype} is not a call"
        if api not in self.methods:
            err = TApplicationException(
                TApplicationException.UNKNOWN_METHOD, f"Unknown function {api}"
            )
            return 0, encode_message(api, seqid, err)
        args = getattr(self._service, api + "_args")()
        try:
            proto.read_struct(args)
        except Exception as exc:
            return f"undecodable arguments of {api}: {exc!r}"
        if on_loop and api in BLOCKING:
            return Blocking(api, seqid, args)
        reply = self.handler.handle(api, args)
        return reply.ticket, encode_message(api, seqid, reply.result)

    def run_blocking(self, call: Blocking) -> tuple[int, bytes]:
        """Run a ``Blocking`` call (on a worker thread)."""
        reply = self.handler.handle(call.api, call.args)
        return reply.ticket, encode_message(call.api, call.seqid, reply.result)

    def run_offloaded(self, frame: bytes) -> tuple[int, bytes] | str:
        """Decode and run a large frame (on a worker thread); never raises, so that the
        connection waiting for it is never left waiting for ever."""
        try:
            outcome = self.execute(frame, on_loop=False)
        except BaseException as exc:
            return f"internal error: {exc!r}"
        assert not isinstance(outcome, Blocking)
        return outcome
