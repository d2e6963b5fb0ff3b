"""The binary protocol's access rules are the REST API's: the token in the hello, the
permission of each operation (``tms.rpc.ops``) on the request's topic; TLS with the
service's certificate."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tls import Pki, make_pki
from tests.tms.rpc.conftest import Raw, Served, T, error_of
from tms.client import MessagingClient
from tms.errors import ForbiddenError, ServiceUnavailableError, UnauthenticatedError
from tms.http.auth import Authorizer, Grant, Permission
from tms.model import TopicId
from tms.rpc.config import RpcConfig
from tms.rpc.frames import Kind, decode_body, rpc
from tms.rpc.ops import OPS

P = Permission
TOKENS = {"root": "root", "reader": "reader", "writer": "writer"}
GRANTS = [
    Grant("root", "*", "*", frozenset({P.READ, P.WRITE, P.ADMIN})),
    Grant("reader", "ns", "t", frozenset({P.READ})),
    Grant("writer", "ns", "t", frozenset({P.WRITE})),
]
OTHER = TopicId("ns", "other")


@pytest.fixture
def secured(make_rpc: Any) -> Served:
    served: Served = make_rpc(authorizer=Authorizer(TOKENS, GRANTS))
    served.service.create_topic(OTHER)
    return served


@pytest.mark.parametrize("token", [None, "", "nope", "root\x00", "röot"])
def test_a_hello_without_a_valid_token_is_refused_and_closed(
    secured: Served, token: str | None
) -> None:
    raw = Raw(secured.address)
    try:
        assert error_of(raw.hello(token))[0] == "unauthenticated"
        assert raw.frame().kind == Kind.GOAWAY
        assert raw.closed()
    finally:
        raw.close()


def test_the_welcome_names_the_principal(secured: Served) -> None:
    raw = Raw(secured.address)
    try:
        assert decode_body(rpc.Welcome, raw.hello("reader").body).principal == "reader"
    finally:
        raw.close()


def _request_for(op_name: str, topic: TopicId) -> Any:
    ns, name = topic.namespace, topic.topic
    return {
        "publish": rpc.PublishRequest(ns=ns, topic=name, payloads=[b"x"]),
        "store": rpc.PublishRequest(ns=ns, topic=name, payloads=[b"x"], write_pointer=2**60),
        "rollback": rpc.RollbackRequest(
            ns=ns,
            topic=name,
            rollback=rpc.RollbackRange(
                write_pointer=2**60, start_ms=1, start_seq=0, end_ms=1, end_seq=0
            ),
        ),
        "markers": rpc.MarkersRequest(ns=ns, topic=name, write_pointers=[2**60]),
        "poll": rpc.PollRequest(ns=ns, topic=name),
        "bounds": rpc.PollRequest(ns=ns, topic=name),
        "receive": rpc.ReceiveRequest(ns=ns, topic=name, max=1),
        "ack": rpc.AckRequest(ns=ns, topic=name, ids=[bytes(10)], attempts=[1]),
        "enqueue": rpc.EnqueueRequest(ns=ns, topic=name, payloads=[b"x"]),
        "nack": rpc.NackRequest(ns=ns, topic=name, ids=[bytes(10)], attempts=[1]),
        "settle": rpc.SettleRequest(ns=ns, topic=name, write_pointer=2**60, commit=False),
        "sub_poll": rpc.SubPollRequest(ns=ns, topic=name, name="s"),
        "sub_commit": rpc.SubCommitRequest(
            ns=ns, topic=name, name="s", position=bytes(20), version=1
        ),
        "sub_position": rpc.SubCommitRequest(
            ns=ns, topic=name, name="s", position=bytes(20), version=1, transaction=b"x"
        ),
    }[op_name]


@pytest.mark.parametrize("op", [op for op in OPS if op.permission is not None], ids=str)
@pytest.mark.parametrize("principal", ["reader", "writer"])
def test_every_operation_needs_its_permission_on_the_topic(
    secured: Served, op: Any, principal: str
) -> None:
    raw = Raw(secured.address)
    try:
        raw.hello(principal)
        for topic in (T, OTHER):
            raw.request(op.code, _request_for(op.name, topic))
            frame = raw.frame()
            allowed = topic == T and op.permission.value[0] == principal[0]
            code = error_of(frame)[0] if frame.flags else None
            assert (code != "forbidden") == allowed, (op.name, principal, topic, code)
    finally:
        raw.close()


def test_the_client_takes_a_token(secured: Served) -> None:
    with MessagingClient(secured.url, token="writer") as writer:
        writer.publish(T, [b"m"])
        with pytest.raises(ForbiddenError):
            writer.poll(T)
    with pytest.raises(UnauthenticatedError), MessagingClient(secured.url, token="x") as nobody:
        nobody.poll(T)
    with MessagingClient(secured.url, token="root") as root:
        assert [m.payload for m in root.poll(T).messages] == [b"m"]
        assert root.list_topics("ns") == ["other", "t"]  # administration over REST, same token


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_with_the_services_certificate(make_rpc: Any, pki: Pki) -> None:
    files = (str(pki.cert_file), str(pki.key_file))
    config = RpcConfig(port=0, tls_cert_file=files[0], tls_key_file=files[1])
    served: Served = make_rpc(config, tls=files)
    assert served.url.startswith("tmss://")
    with MessagingClient(served.url, ca_bundle=pki.ca_file) as client:
        client.publish(T, [b"secret"])
        assert [m.payload for m in client.poll(T).messages] == [b"secret"]
    untrusted = MessagingClient(served.url, retries=0)
    with pytest.raises(ServiceUnavailableError, match="TLS"):
        untrusted.poll(T)
    untrusted.close()
    plain = MessagingClient(served.url.replace("tmss://", "tms://"), retries=0, timeout_s=2)
    with pytest.raises(ServiceUnavailableError):
        plain.poll(T)
    plain.close()
