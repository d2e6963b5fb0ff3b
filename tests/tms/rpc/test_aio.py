"""``tms.aio`` against the real servers: producer and consumer, transactions that commit,
fail, lose a publish's answer or a commit's answer; the asyncio transaction client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from tests.servers import Stack, running_stack
from tms.aio import AsyncMessagingClient, AsyncTxClient, Consumer, Producer
from tms.errors import ServiceUnavailableError, TmsCodecError, TopicNotFoundError
from tms.model import Message, TopicId
from tms.rpc.frames import Kind, encode_body, encode_frame, read_frames, rpc
from tms.store.kv import Fence, Update, WriteOp
from txn.errors import TransactionConflictError, TxServiceUnavailableError
from txn.transaction import Transaction

T = TopicId("ns", "aio")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path) as s:
        s.messaging.create_topic(T)
        yield s


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def tx_read(stack: Stack) -> list[bytes]:
    """What a transactional reader sees now."""
    tx = stack.tx.start_short()
    try:
        return [m.payload for m in stack.messaging.poll(T, transaction=tx).messages]
    finally:
        stack.tx.abort(tx)


def test_publish_and_consume(stack: Stack) -> None:
    async def main() -> list[bytes]:
        async with Producer(stack.rpc_url) as producer:
            await producer.publish(T, b"one")
            await asyncio.gather(*(producer.publish(T, [f"{i}"]) for i in range(50)))
            async with Consumer(stack.rpc_url, T, start="earliest") as consumer:
                got = []
                async for message in consumer:
                    got.append(message.payload)
                    if len(got) == 51:
                        break
                return got

    got = run(main())
    assert got[0] == b"one" and sorted(got[1:]) == sorted(f"{i}".encode() for i in range(50))


def test_a_latest_consumer_gets_only_what_comes_after_it(stack: Stack) -> None:
    stack.messaging.publish(T, [b"old"])

    async def main() -> list[Message]:
        async with Consumer(stack.rpc_url, T, start="latest", wait_ms=2000) as consumer:
            async with AsyncMessagingClient(stack.rpc_url) as other:
                await other.publish(T, [b"new"])
            return await consumer.getmany(timeout_ms=2000)

    assert [m.payload for m in run(main())] == [b"new"]


def test_a_transaction_is_seen_at_commit_all_at_once(stack: Stack) -> None:
    async def main() -> tuple[list[bytes], list[bytes]]:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            async with producer.transaction() as tx:
                await producer.publish(T, [b"a", b"b"])
                await asyncio.gather(producer.publish(T, b"c"), producer.publish(T, b"d"))
                assert producer.transaction_in_progress == tx
                during = await asyncio.to_thread(tx_read, stack)
            return during, await asyncio.to_thread(tx_read, stack)

    during, after = run(main())
    assert during == []
    assert after[:2] == [b"a", b"b"] and sorted(after[2:]) == [b"c", b"d"]


def test_a_transactional_consumer_waits_for_the_commit(stack: Stack) -> None:
    async def main() -> list[bytes]:
        async with (
            Producer(stack.rpc_url, tx_server=stack.tx_address) as producer,
            Consumer(stack.rpc_url, T, tx_server=stack.tx_address, wait_ms=200) as consumer,
        ):
            async with producer.transaction():
                await producer.publish(T, b"tx")
                assert await consumer.getmany(timeout_ms=200) == []  # held
            await producer.publish(T, b"after")
            got: list[bytes] = []
            async for message in consumer:
                got.append(message.payload)
                if len(got) == 2:
                    return got
        raise AssertionError("unreachable")

    assert run(main()) == [b"tx", b"after"]


def test_a_failing_block_rolls_back_and_aborts(stack: Stack) -> None:
    async def main() -> int:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            with pytest.raises(RuntimeError):
                async with producer.transaction() as tx:
                    await producer.publish(T, [b"never"])
                    raise RuntimeError("changed my mind")
            return tx.transaction_id

    tx_id = run(main())
    assert tx_read(stack) == []
    assert tx_id not in stack.manager.get_snapshot().invalid  # aborted, not invalidated


class _GatedWrites:
    """Fault injection: the store's synced writes wait while the gate is closed."""

    def __init__(self, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        kv = stack.tables.kv  # the service's store too
        real = kv.write

        def write(
            ops: Sequence[WriteOp],
            *,
            sync: bool = True,
            epoch: int | None = None,
            fence: Fence | None = None,
            updates: Sequence[Update] = (),
            new_keys: bool = False,
        ) -> None:
            self.gate.wait(30)
            real(
                ops,
                sync=sync,
                epoch=epoch,
                fence=fence,
                updates=updates,
                new_keys=new_keys,
            )

        monkeypatch.setattr(kv, "write", write)


def test_a_publish_with_an_unknown_outcome_invalidates_the_transaction(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    gated = _GatedWrites(stack, monkeypatch)

    async def main() -> int:
        client = AsyncMessagingClient(stack.rpc_url, timeout_s=0.5, retries=0)
        await client.ping()
        async with Producer(client=client, tx_server=stack.tx_address) as producer:
            with pytest.raises(ServiceUnavailableError, match="outcome is unknown"):
                async with producer.transaction() as tx:
                    await producer.publish(T, b"maybe")
            await client.close()
            return tx.transaction_id

    tx_id = run(main())
    gated.gate.set()  # the server stores it after all...
    stored = stack.messaging.poll(T, wait_ms=10_000).messages
    assert [m.payload for m in stored] == [b"maybe"]
    assert tx_id in stack.manager.get_snapshot().invalid  # ...under an invalid transaction
    assert tx_read(stack) == []


class _LostCommit(AsyncTxClient):
    """Fault injection: the commit reaches the server (or not) and its answer is lost."""

    def __init__(self, address: str, *, deliver: bool) -> None:
        super().__init__(address)
        self.deliver = deliver

    async def commit_or_throw(self, tx: Transaction) -> None:
        if self.deliver:
            await super().commit_or_throw(tx)
        raise TxServiceUnavailableError("the answer was lost")


@pytest.mark.parametrize("delivered", [True, False])
def test_a_commit_whose_answer_is_lost_is_settled_never_rolled_back(
    stack: Stack, delivered: bool
) -> None:
    async def main() -> int:
        tx_client = _LostCommit(stack.tx_address, deliver=delivered)
        async with Producer(stack.rpc_url, tx_server=tx_client) as producer:
            try:
                async with producer.transaction() as tx:
                    await producer.publish(T, b"committed?")
            except TxServiceUnavailableError:
                assert not delivered
            else:
                assert delivered
        await tx_client.close()
        return tx.transaction_id

    tx_id = run(main())
    if delivered:
        assert tx_read(stack) == [b"committed?"]
    else:
        assert tx_id in stack.manager.get_snapshot().invalid
        assert tx_read(stack) == []


def test_the_async_tx_client_maps_conflicts_and_pipelines(stack: Stack) -> None:
    async def main() -> None:
        async with AsyncTxClient(stack.tx_address) as txc:
            first, second = await asyncio.gather(txc.start_short(), txc.start_short())
            await txc.can_commit_or_throw(first, [b"k"])
            await txc.commit_or_throw(first)
            with pytest.raises(TransactionConflictError):
                await txc.can_commit_or_throw(second, [b"k"])
            await txc.abort(second)
            assert await txc.status() == "OK"
            started = await asyncio.gather(*(txc.start_short() for _ in range(20)))
            assert len({t.write_pointer for t in started}) == 20
            for tx in started:
                await txc.abort(tx)

    run(main())


def test_errors_and_administration_over_asyncio(stack: Stack) -> None:
    async def main() -> None:
        async with AsyncMessagingClient(stack.rpc_url) as client:
            with pytest.raises(TopicNotFoundError):
                await client.poll(TopicId("ns", "missing"))
            await client.create_topic(TopicId("ns", "made"))
            assert "made" in await client.list_topics("ns")
            token = await client.publish(
                T, [b"x"], tx_write_pointer=stack.tx.start_short().write_pointer
            )
            assert token is not None
            await client.rollback(T, token)
            bounds = await client.bounds(T)
            assert bounds.first is not None

    run(main())


def test_an_unreachable_transaction_server_is_a_tx_error(stack: Stack) -> None:
    async def main() -> None:
        async with AsyncTxClient("127.0.0.1:1", timeout_s=1) as txc:
            with pytest.raises(TxServiceUnavailableError):
                await txc.start_short()

    run(main())


def test_sends_in_flight_resolve_when_durable(stack: Stack) -> None:
    async def main() -> list[Any]:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            sent = [producer.send(T, f"m{i}") for i in range(200)]
            results = await asyncio.gather(*sent)
            failed = producer.send(TopicId("ns", "missing"), b"x")
            with pytest.raises(TopicNotFoundError):
                await failed
            async with producer.transaction():
                with pytest.raises(ValueError, match="publish"):
                    producer.send(T, b"x")
            return results

    assert run(main()) == [None] * 200
    assert [m.payload for m in stack.messaging.poll(T).messages] == [
        f"m{i}".encode() for i in range(200)
    ]


def test_a_send_without_an_open_connection_goes_the_slow_way(stack: Stack) -> None:
    async def main() -> Any:
        async with AsyncMessagingClient(stack.rpc_url) as client:  # not connected yet
            return await client.publish_nowait(T, [b"first"])

    assert run(main()) is None
    assert [m.payload for m in stack.messaging.poll(T).messages] == [b"first"]


def test_publish_nowait_answers_as_publish_does(stack: Stack) -> None:
    # Given a connected client and a transaction
    tx = stack.tx.start_short()

    async def main() -> list[Any]:
        async with AsyncMessagingClient(stack.rpc_url) as client:
            await client.ping()
            # When plain publishes (several payloads, text) and a transactional one are sent
            return await asyncio.gather(
                client.publish_nowait(T, [b"a", "b", b""]),
                client.publish_nowait(T, ["c"]),
                client.publish_nowait(T, [b"t"], tx_write_pointer=tx.write_pointer),
            )

    plain_a, plain_c, token = run(main())
    stack.tx.commit_or_throw(tx)
    # Then the plain ones answer None, the transactional one its rollback token, and
    # each message is stored as sent
    assert plain_a is None and plain_c is None
    assert token is not None and token.detail.tx_write_pointer == tx.write_pointer
    assert sorted(m.payload for m in stack.messaging.poll(T).messages) == [
        b"", b"a", b"b", b"c", b"t"
    ]  # fmt: skip


class _LyingPeer(asyncio.Protocol):
    """A server that welcomes a client, then answers every request with a response whose
    body is not the operation's response (the peer lies)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        frames, used = read_frames(self.buf, 1 << 20)
        del self.buf[:used]
        for frame in frames:
            if frame.op == 0:
                body = encode_body(rpc.Welcome(version=1, max_frame_bytes=1 << 20, http_port=1))
            else:
                body = b"\xff\xff not a PublishResponse"
            self.transport.write(encode_frame(int(Kind.RESPONSE), frame.op, frame.request_id, body))


def test_publish_nowait_answered_with_a_bad_response_fails_with_a_codec_error() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_LyingPeer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with AsyncMessagingClient(
                f"tms://127.0.0.1:{port}", http_url="http://127.0.0.1:1", retries=0
            ) as client:
                await client.ping()
                # When a publish is answered with bytes that are no PublishResponse
                sent = client.publish_nowait(T, [b"x"])
                # Then its future fails with the codec error (it does not hang), and the
                # connection goes on answering
                with pytest.raises(TmsCodecError):
                    await asyncio.wait_for(sent, 5)
                await client.ping()
        finally:
            server.close()
            await server.wait_closed()

    run(main())
