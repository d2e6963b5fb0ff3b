"""``Consumer``: following a topic from asyncio code, in aiokafka's shapes.

::

    async with Consumer("tms://127.0.0.1:15167", topic, tx_server="127.0.0.1:15165") as c:
        async for message in c:          # waits for new messages (long-poll)
            print(message.payload)

``start`` is where reading begins: None or ``"earliest"`` (the oldest message),
``"latest"`` (what is published from now on), a time in ms, or a message id (its
bytes, hex or ``MessageId``; the message itself is included unless ``inclusive`` is
False). ``getmany()`` returns what one poll brings (at most ``batch``), waiting up to
``timeout_ms`` for something.

With ``tx_server`` the consumer reads transactionally, as ``MessagingClient.follow``
does: a read transaction is kept for up to ``tx_refresh_s`` and replaced at once when a
read is held by an entry it cannot see (then, if the new one is held too, it waits a
little, doubling up to a second, rather than spin). Without it, it reads everything
(rolled-back messages excepted).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Any

from tms.aio.base import Clients
from tms.aio.client import AsyncMessagingClient
from tms.aio.txclient import AsyncTxClient
from tms.errors import ServiceUnavailableError
from tms.ids import MessageId
from tms.model import Message, TopicId
from txn.errors import TxError
from txn.transaction import Transaction

__all__ = ["Consumer"]


class Consumer(Clients):
    """See the module docstring. ``client``: share an ``AsyncMessagingClient``."""

    def __init__(
        self,
        url: str | None,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        tx_server: str | tuple[str, int] | AsyncTxClient | None = None,
        batch: int = 1000,
        wait_ms: int = 10_000,
        tx_refresh_s: float = 1.0,
        client: AsyncMessagingClient | None = None,
        **options: Any,
    ) -> None:
        super().__init__(url, tx_server, client, options)
        self.topic = topic
        self._start: MessageId | bytes | str | int | None = start
        self._inclusive = inclusive
        self._batch = batch
        self._wait_ms = wait_ms
        self._tx_refresh_s = tx_refresh_s
        self._buffer: deque[Message] = deque()
        self._tx: Transaction | None = None
        self._tx_started = 0.0
        self._held_delay = 0.01
        self._backoff = 0.1

    @property
    def position(self) -> MessageId | bytes | str | int | None:
        """Where the next read starts (after the last message handed out)."""
        return self._start

    async def start(self) -> None:
        """Connect, and resolve ``"latest"`` to the end of the topic as of now."""
        if self._start == "earliest":
            self._start = None
        elif self._start == "latest":
            bounds = await self.client.bounds(self.topic)
            if bounds.last is None:
                self._start = None
            else:
                self._start, self._inclusive = MessageId(*bounds.last).to_bytes(), False
        else:
            await self.client.ping()

    async def stop(self) -> None:
        if self._tx is not None and self.tx_client is not None:
            with contextlib.suppress(TxError):
                await self.tx_client.abort(self._tx)
            self._tx = None
        await self.close_clients()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        while not self._buffer:
            self._buffer.extend(await self._read(self._wait_ms))
        return self._buffer.popleft()

    async def getmany(self, timeout_ms: int = 0) -> list[Message]:
        """What is buffered, else what one poll brings (waiting up to ``timeout_ms``)."""
        if self._buffer:
            taken = list(self._buffer)
            self._buffer.clear()
            return taken
        return await self._read(timeout_ms)

    async def _transaction(self) -> tuple[Transaction | None, bool]:
        """The read transaction to use (refreshed when due), and whether it is new."""
        if self.tx_client is None:
            return None, False
        now = time.monotonic()
        if self._tx is not None and now - self._tx_started < self._tx_refresh_s:
            return self._tx, False
        if self._tx is not None:
            old, self._tx = self._tx, None
            with contextlib.suppress(TxError):
                await self.tx_client.abort(old)  # it wrote nothing
        self._tx, self._tx_started = await self.tx_client.start_short(), now
        return self._tx, True

    async def _read(self, wait_ms: int) -> list[Message]:
        tx, fresh = await self._transaction()
        try:
            result = await self.client.poll(
                self.topic,
                start=self._start,
                inclusive=self._inclusive,
                limit=self._batch,
                transaction=tx,
                wait_ms=wait_ms,
            )
        except ServiceUnavailableError:
            await asyncio.sleep(self._backoff)
            self._backoff = min(self._backoff * 4, 10.0)
            return []
        self._backoff = 0.1
        messages = result.messages
        if result.held:
            self._tx_started = -float("inf")  # read on with a newer transaction
            if fresh and not messages:
                await asyncio.sleep(self._held_delay)
                self._held_delay = min(self._held_delay * 2, 1.0)
        if messages:
            self._start, self._inclusive = messages[-1][0], False
            self._held_delay = 0.01
        return messages
