"""What the binary protocol's subscription operations do (``Backend``'s part for them):
poll a subscription (op 9), commit its position (op 10), write a position as part of a
transaction (op 11). They do what the REST routes do (``tms.http.subscriptions``), with
the same checks and errors; the administration of subscriptions stays on REST.

* ``sub_poll`` reads on the worker pool (``Subscriptions.read``, a commit of ``start``
  riding on it with ``commit_version``) — a poll of at most ``LOOP_READ_MESSAGES`` from
  local stores (``Subscriptions.local_reads``), committing nothing or with
  ``commit_later``, first on the loop's thread, inside ``tms.subnowait.not_waiting`` (a
  read that would wait goes to the pool having done nothing; one that committed and
  found nothing long-polls on without committing again) — and long-polls as the REST
  route does
  (``tms.http.waiting.LongPoll``: woken by the topic's changes and by the transaction it
  is held behind finishing; with ``reread``, reading what finished and answering it:
  ``tms.http.subscriptions.long_poll_subscription``). Its answer is at most
  ``max_poll_bytes``: a read cut short answers the position after the last message it
  kept, which is what a read with that smaller limit answers.
* ``sub_commit`` moves the stored position (``Subscriptions.commit``) on the pool.
* ``sub_position`` checks the move on the pool (``Subscriptions.prepare_position``) and
  submits the ``WritePosition`` to the topic's group commit, as the REST route does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from tms.codec.subscriptions import preferences_to_json
from tms.errors import TmsInvalidArgumentError, TmsTransientError
from tms.http.subscriptions import long_poll_subscription, transaction_from
from tms.http.waiting import LongPoll
from tms.ids import MESSAGE_ID_SIZE, MessageId
from tms.model import TopicId
from tms.operations import WritePosition
from tms.rpc.config import LOOP_READ_MESSAGES
from tms.rpc.frames import rpc
from tms.service import MessagingService
from tms.subnowait import WouldWait, not_waiting
from tms.subread import DEFAULT_LIMIT, SubscriptionPoll
from tms.subscription import Subscription, SubscriptionId, after
from txn.transaction import Transaction

__all__ = ["SubscriptionOps", "poll_response", "subscription_state"]

T = TypeVar("T")
Done = Callable[[Any], None]
_MESSAGE_OVERHEAD = 28  # in a SubPollResponse: the 20-byte id, two 4-byte lengths


def _position(value: bytes | None, what: str) -> MessageId | None:
    if value is None:
        return None
    if len(value) != MESSAGE_ID_SIZE:
        raise TmsInvalidArgumentError(f"{what} must be a {MESSAGE_ID_SIZE}-byte id")
    return MessageId.from_bytes(value)


def _subscription(req: Any, topic: TopicId) -> SubscriptionId:
    return SubscriptionId(topic, req.name)  # validates the name


def poll_response(
    poll: SubscriptionPoll, finished: bool, max_bytes: int, fresh: bool = False
) -> Any:
    """The ``SubPollResponse`` of a read: at most ``max_bytes`` of messages (at least
    one), and then the position after the last one kept."""
    ids: list[bytes] = []
    payloads: list[bytes] = []
    size = 0
    position = poll.position
    for message in poll.messages:
        if ids and size + len(message.payload) + _MESSAGE_OVERHEAD > max_bytes:
            position = after(MessageId.from_bytes(ids[-1]))
            break
        ids.append(message.id_bytes)
        payloads.append(message.payload)
        size += len(message.payload) + _MESSAGE_OVERHEAD
    return rpc.SubPollResponse(
        ids=ids,
        payloads=payloads,
        held=poll.held and position == poll.position,
        held_finished=finished and position == poll.position,
        start=poll.start.to_bytes(),
        position=position.to_bytes(),
        version=poll.version,
        fresh=fresh or None,
        read_error=None if poll.read_error is None else poll.read_error.code,
        read_error_message=None if poll.read_error is None else str(poll.read_error),
        durable_version=poll.durable_version,
    )


def subscription_state(sub: Subscription) -> Any:
    """A subscription's record as a ``SubscriptionState`` struct."""
    return rpc.SubscriptionState(
        version=sub.version,
        position=sub.position.to_bytes(),
        committed_by=sub.committed_by,
        updated_ms=sub.updated_ms,
        generation=sub.state.generation,
        preferences=json.dumps(preferences_to_json(sub.preferences), separators=(",", ":")),
    )


class SubscriptionOps:
    """A part of ``tms.rpc.backend.Backend``: its subscription operations."""

    svc: MessagingService
    _pool: Executor
    _loop: asyncio.AbstractEventLoop
    _max_wait_ms: int
    _max_poll_bytes: int
    _polls: set[asyncio.Task[None]]
    _writes: set[asyncio.Task[None]]
    _long_poll: LongPoll

    def _in_time(self, deadline: float | None) -> None:
        raise NotImplementedError  # Backend's

    def _task(self, tasks: set[asyncio.Task[None]], run: Any, done: Done) -> None:
        async def answer() -> None:
            try:
                response = await run
            except asyncio.CancelledError:
                done(TmsTransientError("the server is stopping"))
                raise
            except Exception as exc:  # a TmsError; anything else is an internal error
                response = exc
            done(response)

        task = self._loop.create_task(answer())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _on_pool(self, deadline: float | None, fn: Callable[..., T], *args: Any) -> T:
        def call() -> T:
            self._in_time(deadline)
            return fn(*args)

        return await self._loop.run_in_executor(self._pool, call)

    def sub_poll(self, req: Any, topic: TopicId, deadline: float | None, done: Done) -> None:
        sub = _subscription(req, topic)
        start = _position(req.start, "start")
        limit = req.limit if req.limit is not None else DEFAULT_LIMIT
        tx = transaction_from(req.transaction)
        wait_ms = req.wait_ms or 0
        if not 0 <= wait_ms <= self._max_wait_ms:
            raise TmsInvalidArgumentError(f"wait_ms must be in 0..{self._max_wait_ms}")
        if req.commit_version is not None and start is None:
            raise TmsInvalidArgumentError("a commit before a read commits its start: give one")
        commit_version = req.commit_version
        if self._reads_here(limit, commit_version, req.commit_later):
            poll = self._poll_here(sub, start, limit, tx, commit_version, deadline)
            if poll is not None:
                if wait_ms == 0 or poll.messages or poll.read_error is not None:
                    done(poll_response(poll, False, self._max_poll_bytes))
                    return
                commit_version = None  # (committed: the long poll below reads on without)
        first = [deadline]  # the first read is dropped past the deadline, not the next ones

        async def on_pool(read: Callable[[], SubscriptionPoll]) -> SubscriptionPoll:
            late, first[0] = first[0], None
            return await self._on_pool(late, read)

        async def run() -> Any:
            poll, finished, fresh = await long_poll_subscription(
                self._long_poll,
                self.svc.subscriptions,
                sub,
                on_pool,
                start=start,
                limit=limit,
                transaction=tx,
                wait_ms=wait_ms,
                commit_version=commit_version,
                reread=bool(req.reread),
                commit_later=bool(req.commit_later),
            )
            return poll_response(poll, finished, self._max_poll_bytes, fresh)

        self._task(self._polls, run(), done)

    def _reads_here(self, limit: int, commit_version: int | None, commit_later: Any) -> bool:
        """Whether a poll's first read may be tried on the loop's thread: a small one, from
        local stores (the messages' and the records'), committing nothing or a commit
        answered before its write."""
        return (
            limit <= LOOP_READ_MESSAGES
            and (commit_version is None or bool(commit_later))
            and self.svc.subscriptions.local_reads()
        )

    def _poll_here(  # noqa: PLR0917 - the poll's arguments
        self,
        sub: SubscriptionId,
        start: MessageId | None,
        limit: int,
        tx: Transaction | None,
        commit_version: int | None,
        deadline: float | None,
    ) -> SubscriptionPoll | None:
        """The poll's first read on the loop's thread, or None when it would wait
        (``tms.subnowait``: then nothing was done, and it is read on a worker)."""
        self._in_time(deadline)
        try:
            with not_waiting():
                return self.svc.subscriptions.read(
                    sub,
                    start_from=start,
                    limit=limit,
                    transaction=tx,
                    commit_version=commit_version,
                    commit_later=commit_version is not None,
                )
        except WouldWait:
            return None

    def sub_commit(self, req: Any, topic: TopicId, deadline: float | None, done: Done) -> None:
        sub = _subscription(req, topic)
        position = _position(req.position, "position")
        if position is None or req.version is None:
            raise TmsInvalidArgumentError("a commit carries a position and the version read")
        tx = transaction_from(req.transaction)

        async def run() -> Any:
            commit = self.svc.subscriptions.commit
            moved = await self._on_pool(deadline, commit, sub, position, req.version, tx)
            return subscription_state(moved)

        self._task(self._writes, run(), done)

    def sub_position(self, req: Any, topic: TopicId, deadline: float | None, done: Done) -> None:
        sub = _subscription(req, topic)
        position = _position(req.position, "position")
        if position is None or req.version is None:
            raise TmsInvalidArgumentError("a commit carries a position and the version read")
        tx = transaction_from(req.transaction)
        if tx is None:
            raise TmsInvalidArgumentError("a commit in a transaction carries the transaction")

        async def run() -> Any:
            prepare = self.svc.subscriptions.prepare_position
            write: WritePosition = await self._on_pool(
                deadline, prepare, sub, position, req.version, tx
            )
            await self.svc.submit_async(write, deadline=deadline)
            return rpc.PositionWritten(write_pointer=write.write_pointer)

        self._task(self._writes, run(), done)
