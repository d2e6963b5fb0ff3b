"""Only the transaction manager issues write pointers: ``txn serve`` and
``tms serve --tx-server`` as real processes, driven over HTTP and over the binary protocol.

Forged pointers (2^62, now + 1 h, a never-issued one in the past) are refused for
publish, store and commit markers with 409 ``transaction_not_in_progress`` and nothing
stored, so transactional consumers are not held; a rollback token of a committed
transaction is refused too. A real transaction's pointer and a checkpoint's are
accepted. With the transaction server down, transactional writes answer 503
``transaction_service_unavailable`` while non-transactional publishing goes on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.procs import RPC_LISTENING, ProcessStack
from tms.client import MessagingClient
from tms.codec import avro
from tms.errors import TransactionNotInProgressError, TransactionServiceError
from tms.model import RollbackDetail, TopicId
from txn.transaction import MAX_TX_PER_MS

T = TopicId("ns", "guarded")


@pytest.fixture(params=["http", "binary"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcessStack]:
    extra = ("--rpc-port", "0") if request.param == "binary" else ()
    with ProcessStack(tmp_path, *extra, topics=[T]) as running:
        yield running


@pytest.fixture
def client(stack: ProcessStack) -> Iterator[MessagingClient]:
    """Over the binary protocol when the service speaks it, else over REST."""
    binary = "--rpc-port" in stack.tms.extra
    url = stack.tms.printed(RPC_LISTENING) if binary else stack.url
    with MessagingClient(url, retries=0) as made:
        yield made


def consumer_view(stack: ProcessStack) -> tuple[list[bytes], bool]:
    reader = stack.tx.start_short()
    try:
        with MessagingClient(stack.url) as client:
            result = client.poll(T, transaction=reader)
    finally:
        stack.tx.abort(reader)
    return [m.payload for m in result.messages], result.held


def test_forged_write_pointers_are_refused_and_store_nothing(
    stack: ProcessStack, client: MessagingClient
) -> None:
    first = stack.tx.start_short()
    time.sleep(0.01)
    tx = stack.tx.start_short()
    client.publish(T, [b"before"])
    forged = {
        "2^62": 2**62,
        "now + 1 h": (int(time.time() * 1000) + 3_600_000) * MAX_TX_PER_MS,
        "never issued": tx.write_pointer - 1,
        "finished": first.write_pointer,
    }
    stack.tx.commit_or_throw(first)
    for name, wp in forged.items():
        with pytest.raises(TransactionNotInProgressError):
            client.publish(T, [b"forged " + name.encode()], tx_write_pointer=wp)
        with pytest.raises(TransactionNotInProgressError):
            client.store(T, [b"staged " + name.encode()], tx_write_pointer=wp)
        with pytest.raises(TransactionNotInProgressError):
            client.publish(T, [], tx_write_pointer=wp)  # a commit marker
    for wp in (2**62, forged["now + 1 h"]):
        with pytest.raises(TransactionNotInProgressError):
            client.publish_markers(T, [wp])
    # The JSON error body, as documented
    body = avro.encode_publish_request(2**62, [b"x"])
    raw = requests.post(
        f"{stack.url}/v1/namespaces/ns/topics/guarded/publish",
        data=body,
        headers={"Content-Type": "avro/binary"},
        timeout=10,
    )
    assert raw.status_code == 409
    assert raw.json()["error"] == "transaction_not_in_progress"
    # Nothing was stored: everything reads as before, and consumers are not held
    client.publish(T, [b"after"])
    assert [m.payload for m in client.poll(T).messages] == [b"before", b"after"]
    assert consumer_view(stack) == ([b"before", b"after"], False)
    assert [r["kind"] for r in client.inspect(T)["rows"]] == ["plain", "plain"]
    stack.tx.abort(tx)


def test_real_and_checkpoint_pointers_are_accepted(
    stack: ProcessStack, client: MessagingClient
) -> None:
    tx = stack.tx.start_long()
    client.publish(T, [b"direct"], tx_write_pointer=tx.write_pointer)
    checkpoint = stack.tx.checkpoint(tx)
    client.store(T, [b"staged"], tx_write_pointer=checkpoint.write_pointer)
    client.publish_markers(T, [checkpoint.write_pointer])
    assert consumer_view(stack) == ([], True)  # held at the open transaction
    stack.tx.commit_or_throw(checkpoint)
    assert consumer_view(stack) == ([b"direct", b"staged"], False)


def test_rollback_of_a_committed_transaction_is_refused(
    stack: ProcessStack, client: MessagingClient
) -> None:
    tx = stack.tx.start_short()
    token = client.publish(T, [b"kept"], tx_write_pointer=tx.write_pointer)
    assert token is not None
    stack.tx.commit_or_throw(tx)
    # Given the token of a committed publish (or one guessed from the message ids)
    with pytest.raises(TransactionNotInProgressError):
        client.rollback(T, token)
    guessed = RollbackDetail(tx.write_pointer, 0, 0, 2**62, 0xFFFF)
    with pytest.raises(TransactionNotInProgressError):
        client.rollback(T, type(token)(avro.encode_publish_response(guessed), guessed))
    # Then the messages stay committed and visible
    assert consumer_view(stack) == ([b"kept"], False)
    # While a transaction in progress (or an invalid one) may roll itself back
    open_tx = stack.tx.start_short()
    token = client.publish(T, [b"gone"], tx_write_pointer=open_tx.write_pointer)
    assert token is not None
    stack.tx.invalidate(open_tx.transaction_id)
    client.rollback(T, token)
    assert [m.payload for m in client.poll(T).messages] == [b"kept", b"gone"]
    assert consumer_view(stack) == ([b"kept"], False)


def test_transaction_server_down(stack: ProcessStack, client: MessagingClient) -> None:
    tx = stack.tx.start_short()
    # When the transaction server is gone
    stack.txn.kill()
    time.sleep(1.5)  # past the guard's cache
    # Then transactional writes answer 503, non-transactional ones go on
    with pytest.raises(TransactionServiceError) as refused:
        client.publish(T, [b"tx"], tx_write_pointer=tx.write_pointer)
    assert refused.value.status == 503
    with pytest.raises(TransactionServiceError):
        client.store(T, [b"tx"], tx_write_pointer=tx.write_pointer)
    client.publish(T, [b"plain"])
    assert [m.payload for m in client.poll(T).messages] == [b"plain"]
