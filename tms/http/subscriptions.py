"""The subscription routes (``tms.subscriptions``) under
``/v1/namespaces/{namespace}/topics/{topic}/subscriptions``, and the ``finished`` route
publishers use to wake readers held behind their transactions.

Subscription bodies are JSON (``tms.codec.subscription_bodies``); a poll takes a
``ConsumeRequest`` in either body format and answers in the same one, as a topic's poll
does, whole (at most 10,000 messages), with the headers ``X-Tms-Start`` (where it read
from), ``X-Tms-Position`` (where the next read starts: commit it once the messages are
processed) and ``X-Tms-Version``
(the record's version, to send with that commit); JSON answers say both in the body
too. ``?commit=VERSION`` commits the poll's ``startFrom`` (required then) with that
version before reading: an at-least-once consumer's commit and next read in one request.
``?reread=true`` (for a reader that is not inside a transaction of its own): when the
transaction the poll is held behind finishes, read again with what has finished and
answer the messages (``long_poll_subscription``); such an answer says ``X-Tms-Fresh:
true`` (JSON ``"fresh": true``): read on, and commit, with a transaction started after
it. A poll whose read failed after its commit was written answers the commit (its
position and version) without messages, with ``X-Tms-Read-Error`` (the error's code)
and ``X-Tms-Read-Error-Message`` (JSON ``"readError": {"error": CODE, "message":
TEXT}``): poll again, the commit is done.

``SubscriptionApi`` is a part of ``tms.http.app.Api``; its routes and their access are
declared in ``tms.http.routes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from tms.codec import avro
from tms.codec import json as jsonc
from tms.codec.avro import ConsumeSpec
from tms.codec.subscription_bodies import (
    decode_commit_request,
    decode_preferences,
    decode_preferences_update,
    decode_seek_request,
    decode_write_pointers,
    subscription_to_json,
)
from tms.errors import TmsCodecError, TmsError, TmsInvalidArgumentError
from tms.http.config import HttpConfig
from tms.http.waiting import LongPoll
from tms.ids import MESSAGE_ID_SIZE, MessageId
from tms.model import TopicId
from tms.operations import RollbackPosition
from tms.service import MessagingService
from tms.subread import DEFAULT_LIMIT, SubscriptionPoll
from tms.subscription import SubscriptionId, after
from txn.codec import decode_transaction
from txn.errors import CodecError as TxCodecError
from txn.transaction import Transaction

if TYPE_CHECKING:
    from tms.subscriptions import Subscriptions

__all__ = ["SubscriptionApi", "long_poll_subscription", "transaction_from"]

T = TypeVar("T")
AVRO = "avro/binary"
JSON = "application/json"


def transaction_from(data: bytes | None) -> Transaction | None:
    """A transaction in Tephra's ``TransactionCodec`` bytes, or None."""
    if data is None:
        return None
    try:
        return decode_transaction(data)
    except TxCodecError as exc:
        raise TmsCodecError(f"the transaction does not decode: {exc}") from exc


async def long_poll_subscription(
    long_poll: LongPoll,
    subs: Subscriptions,
    sub: SubscriptionId,
    on_pool: Callable[[Callable[[], SubscriptionPoll]], Awaitable[SubscriptionPoll]],
    *,
    start: MessageId | None,
    limit: int,
    transaction: Transaction | None,
    wait_ms: int,
    commit_version: int | None,
    reread: bool,
    commit_later: bool = False,
) -> tuple[SubscriptionPoll, bool, bool]:
    """A subscription poll's reads (REST and binary alike), each run by ``on_pool``:
    the first commits ``start`` with ``commit_version``; with ``reread``, once the
    transaction it is held behind finished, the next ones read with what finished
    (``Subscriptions.read``'s ``finished``: the pointers this poll saw finish and those
    reported finished recently). Returns the last read, whether the transaction it is
    held behind finished, and whether it was read with what finished (``fresh``).
    Cancelled (a server stopping) once its commit was written, or while the committing
    read runs (which is let finish), it returns that read instead: the commit is
    answered, never an error its retry would meet as ``bad_version``. ``commit_later``:
    the commit is answered before its write is durable (``Subscriptions.read``)."""
    commit = [commit_version]  # the first read commits, the long poll's next ones not
    finished: set[int] = set()
    fresh = [False]
    committed: list[SubscriptionPoll] = []  # the committing read's answer, once it came

    async def read() -> SubscriptionPoll:
        (version, commit[0]), fresh[0] = (commit[0], None), bool(finished)
        reading = on_pool(
            partial(
                subs.read,
                sub,
                start_from=start,
                limit=limit,
                transaction=transaction,
                commit_version=version,
                commit_later=commit_later,
                finished=frozenset(finished),
            )
        )
        if version is None:
            return await reading
        # A committing read, once under way, is finished even when the poll is
        # cancelled (a server stopping): its commit may be durable, so it is answered.
        task = asyncio.ensure_future(reading)
        try:
            committed.append(await asyncio.shield(task))
        except asyncio.CancelledError:
            while not task.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait({task})
            if not task.cancelled() and task.exception() is None:
                committed.append(task.result())
            raise
        return committed[-1]

    def outcome(poll: SubscriptionPoll) -> tuple[bool, int | None]:
        found = bool(poll.messages) or poll.read_error is not None
        return found, poll.held_pointer if poll.held else None

    def on_finished(write_pointer: int) -> bool:
        if not reread or transaction is None or write_pointer in finished:
            return False  # (seen finished already: the manager does not say so: answer)
        finished.add(write_pointer)
        finished.update(long_poll.recent(sub.topic, transaction.read_pointer))
        return True

    try:
        poll, done = await long_poll.run(sub.topic, wait_ms, read, outcome, on_finished)
    except asyncio.CancelledError:
        if not committed:
            raise
        return committed[0], False, False  # cut short after its commit: answer that
    return poll, done, fresh[0]


def _query_bool(request: web.Request, name: str) -> bool:
    """Query parameter ``name``: ``true`` or ``false`` (the default)."""
    value = request.query.get(name, "false")
    if value not in ("true", "false"):
        raise TmsInvalidArgumentError(f"{name} must be true or false, got {value!r}")
    return value == "true"


def _header_text(text: str) -> str:
    """``text`` as a header value: printable ASCII on one line, at most 200 characters."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:200])


def _error_json(error: TmsError) -> bytes:
    return json.dumps({"error": error.code, "message": str(error)}).encode()


def _subscription(request: web.Request) -> SubscriptionId:
    topic = TopicId(request.match_info["namespace"], request.match_info["topic"])
    return SubscriptionId(topic, request.match_info["name"])


def _query_int(request: web.Request, name: str) -> int | None:
    text = request.query.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise TmsInvalidArgumentError(f"{name} must be an integer, got {text!r}") from None


class SubscriptionApi:
    svc: MessagingService
    pool: ThreadPoolExecutor
    config: HttpConfig
    long_poll: LongPoll | None

    async def _body(self, request: web.Request) -> bytes:
        raise NotImplementedError  # tms.http.app.Api's

    async def _consume_spec(self, request: web.Request) -> tuple[ConsumeSpec, str]:
        raise NotImplementedError  # tms.http.app.Api's

    def _wait_ms(self, request: web.Request) -> int:
        raise NotImplementedError  # tms.http.app.Api's

    async def _sub_call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def _json_body(self, request: web.Request) -> bytes:
        if request.content_type not in (JSON, "application/octet-stream") and request.can_read_body:
            raise TmsInvalidArgumentError(f"subscription requests take {JSON} bodies")
        return await self._body(request)

    # -- records ----------------------------------------------------------------------------

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        topic = TopicId(request.match_info["namespace"], request.match_info["topic"])
        subs = await self._sub_call(self.svc.subscriptions.list, topic)
        return web.json_response([subscription_to_json(s) for s in subs])

    async def create_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        preferences = decode_preferences(await self._json_body(request))
        created = await self._sub_call(self.svc.subscriptions.create, sub, preferences)
        return web.json_response(subscription_to_json(created))

    async def get_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        found = await self._sub_call(self.svc.subscriptions.get, sub)
        return web.json_response(subscription_to_json(found))

    async def update_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        preferences, version = decode_preferences_update(await self._json_body(request))
        updated = await self._sub_call(
            self.svc.subscriptions.update_preferences, sub, preferences, version
        )
        return web.json_response(subscription_to_json(updated))

    async def delete_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        version = _query_int(request, "version")
        if version is None:
            raise TmsInvalidArgumentError("deleting a subscription takes ?version=N (last read)")
        await self._sub_call(self.svc.subscriptions.delete, sub, version)
        return web.json_response({})

    # -- positions --------------------------------------------------------------------------

    async def seek_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        seek = decode_seek_request(await self._json_body(request))
        moved = await self._sub_call(
            self.svc.subscriptions.seek,
            sub,
            seek.to,
            seek.version,
            transaction_from(seek.transaction),
        )
        return web.json_response(subscription_to_json(moved))

    async def commit_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        commit = decode_commit_request(await self._json_body(request))
        tx = transaction_from(commit.transaction)
        subs = self.svc.subscriptions
        if not commit.in_transaction:
            moved = await self._sub_call(subs.commit, sub, commit.position, commit.version, tx)
            return web.json_response(subscription_to_json(moved))
        assert tx is not None
        write = await self._sub_call(
            subs.prepare_position, sub, commit.position, commit.version, tx
        )
        await self.svc.submit_async(write)
        return web.json_response(
            {
                "position": commit.position.hex,
                "version": commit.version,
                "transactionWritePointer": write.write_pointer,
            }
        )

    async def rollback_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        pointers = decode_write_pointers(await self._json_body(request), "PositionsRollback")
        removed = await asyncio.gather(
            *(self.svc.submit_async(RollbackPosition(sub.topic, sub.name, wp)) for wp in pointers)
        )
        return web.json_response({"rolledBack": sum(removed)})

    async def transactions_finished(self, request: web.Request) -> web.Response:
        topic = TopicId(request.match_info["namespace"], request.match_info["topic"])
        pointers = decode_write_pointers(await self._json_body(request), "TransactionsFinished")
        await self._sub_call(self.svc.get_topic, topic)  # an unknown topic is a 404
        self.svc.transactions_finished(topic, pointers)
        return web.json_response({})

    # -- reading ----------------------------------------------------------------------------

    async def poll_subscription(self, request: web.Request) -> web.Response:
        sub = _subscription(request)
        spec, fmt = await self._consume_spec(request)
        if isinstance(spec.start_from, int):
            raise TmsInvalidArgumentError("a subscription reads from a position (a message id)")
        start: MessageId | None = None
        if spec.start_from is not None:
            if len(spec.start_from) != MESSAGE_ID_SIZE:
                raise TmsInvalidArgumentError(f"startFrom must be a {MESSAGE_ID_SIZE}-byte id")
            start = MessageId.from_bytes(spec.start_from)
            if not spec.inclusive:
                start = after(start)
        limit = spec.limit if spec.limit is not None else DEFAULT_LIMIT
        tx = transaction_from(spec.transaction)
        wait_ms = self._wait_ms(request)
        commit_version = _query_int(request, "commit")
        reread = _query_bool(request, "reread")
        commit_later = _query_bool(request, "commit_later")
        if commit_version is not None and start is None:
            raise TmsInvalidArgumentError("?commit commits startFrom: give one")
        assert self.long_poll is not None
        poll, finished, fresh = await long_poll_subscription(
            self.long_poll,
            self.svc.subscriptions,
            sub,
            self._sub_call,
            start=start,
            limit=limit,
            transaction=tx,
            wait_ms=wait_ms,
            commit_version=commit_version,
            reread=reread,
            commit_later=commit_later,
        )
        headers = {
            "X-Tms-Start": poll.start.hex,
            "X-Tms-Position": poll.position.hex,
            "X-Tms-Version": str(poll.version),
        }
        if poll.held:
            headers["X-Tms-Held"] = "true"
            if finished:
                headers["X-Tms-Held-Finished"] = "true"
        if fresh:
            headers["X-Tms-Fresh"] = "true"
        durable = poll.version if poll.durable_version is None else poll.durable_version
        if poll.durable_version is not None:
            headers["X-Tms-Durable-Version"] = str(durable)
        failed = poll.read_error
        if failed is not None:
            headers["X-Tms-Read-Error"] = failed.code
            headers["X-Tms-Read-Error-Message"] = _header_text(str(failed))
        if fmt == AVRO:
            body = b"".join(avro.encode_consume_blocks(poll.messages, self.config.chunk_bytes))
            body += avro.ARRAY_END
        else:
            body = (
                b'{"messages":['
                + jsonc.encode_messages(poll.messages, first=True)
                + f'],"held":{str(poll.held).lower()},"heldFinished":{str(finished).lower()},'
                f'"fresh":{str(fresh).lower()},'
                f'"position":"{poll.position.hex}","version":{poll.version},'
                f'"durableVersion":{durable}'.encode()
                + (b"}" if failed is None else b',"readError":' + _error_json(failed) + b"}")
            )
        return web.Response(body=body, content_type=fmt, headers=headers)
