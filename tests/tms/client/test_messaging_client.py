"""``MessagingClient`` on a scripted transport: what it sends, how answers and failures
come back, what it retries and how long it waits in between (no server; the service's
side of these calls is tested in ``tests/tms/http``)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice

import pytest

from tests.tms.helpers import tx
from tms.client import MessagingClient
from tms.client.transport import Reply, TransportError
from tms.codec import avro
from tms.codec import json as jsonc
from tms.errors import (
    ServiceUnavailableError,
    StorageUnavailableError,
    TmsInvalidArgumentError,
    TopicNotFoundError,
)
from tms.model import MarkersResult, Message, RollbackDetail, TopicId
from txn.codec import decode_transaction
from txn.transaction import Transaction

T = TopicId("ns", "t")
BASE = "/v1/namespaces/ns/topics/t"


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    body: bytes | None
    headers: Mapping[str, str]
    params: Mapping[str, str] | None
    timeout_s: float


class ScriptedTransport:
    """Answers requests from a script, in order: a ``Reply`` or a ``TransportError`` to
    raise (the network failing); records every request."""

    def __init__(self, *answers: Reply | TransportError) -> None:
        self.script: deque[Reply | TransportError] = deque(answers)
        self.sent: list[Sent] = []
        self.closed = False

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout_s: float,
    ) -> Reply:
        self.sent.append(Sent(method, path, body, dict(headers or {}), params, timeout_s))
        answer = self.script.popleft()
        if isinstance(answer, TransportError):
            raise answer
        return answer

    def close(self) -> None:
        self.closed = True


def ok(body: bytes = b"", **headers: str) -> Reply:
    return Reply(200, "OK", headers, body)


def error(status: int, code: str, message: str = "no") -> Reply:
    body = json.dumps({"error": code, "message": message}).encode()
    return Reply(status, "", {"Content-Type": "application/json"}, body)


LOST = TransportError("connection reset")


def client(transport: ScriptedTransport, **options: object) -> tuple[MessagingClient, list[float]]:
    slept: list[float] = []
    made = MessagingClient(
        "http://tms.invalid:1",
        transport=transport,
        sleep=slept.append,
        **options,  # type: ignore[arg-type]
    )
    return made, slept


def test_publish_sends_avro_and_returns_the_rollback_token() -> None:
    detail = RollbackDetail(42, 7, 0, 7, 1)
    transport = ScriptedTransport(ok(), ok(avro.encode_publish_response(detail)))
    messaging, _ = client(transport, token="s3cret")
    assert messaging.publish(T, ["a", b"b"]) is None
    token = messaging.publish(T, ["c"], tx_write_pointer=42)
    assert token is not None and token.detail == detail
    assert token.raw == avro.encode_publish_response(detail)
    plain, transactional = transport.sent
    assert (plain.method, plain.path) == ("POST", BASE + "/publish")
    assert plain.headers["Content-Type"] == "avro/binary"
    assert plain.headers["Authorization"] == "Bearer s3cret"
    assert avro.decode_publish_request(plain.body or b"") == (None, [b"a", b"b"])
    assert avro.decode_publish_request(transactional.body or b"") == (42, [b"c"])


def test_per_message_ttls_go_as_json() -> None:
    transport = ScriptedTransport(ok(b'{"published":2}'))
    messaging, _ = client(transport)
    assert messaging.publish(T, ["a", "b"], ttls=[5, None]) is None
    [sent] = transport.sent
    assert sent.headers["Content-Type"] == "application/json"
    assert jsonc.decode_publish_request(sent.body or b"") == (None, [b"a", b"b"], [5, None])


def test_a_publish_is_never_sent_twice() -> None:
    # A lost answer or a 503: the service may have stored it, so no retry
    for failure in (LOST, error(503, "storage_unavailable")):
        transport = ScriptedTransport(failure, ok())
        messaging, slept = client(transport)
        with pytest.raises((ServiceUnavailableError, StorageUnavailableError)):
            messaging.publish(T, ["once"])
        assert len(transport.sent) == 1 and slept == []
    transport = ScriptedTransport(LOST, ok())
    messaging, _ = client(transport)
    with pytest.raises(ServiceUnavailableError):
        messaging.store(T, ["staged"], tx_write_pointer=9)
    assert len(transport.sent) == 1


def test_idempotent_calls_retry_with_growing_pauses_then_give_up() -> None:
    # Given a service that is unreachable, then unavailable, then answers
    marker = avro.encode_publish_response(RollbackDetail(9, 1, 0, 1, 0))
    transport = ScriptedTransport(LOST, error(503, "storage_unavailable"), ok(marker))
    messaging, slept = client(transport, backoff_s=0.5)
    # When a commit marker (published once per write pointer) is sent
    token = messaging.publish(T, [], tx_write_pointer=9)
    # Then it is retried after 0.5 s and 2 s, and the third answer counts
    assert token is not None and token.raw == marker
    assert slept == pytest.approx([0.5, 2.0])
    assert len(transport.sent) == 3
    # With every attempt failing, the last failure is raised after `retries` retries
    transport = ScriptedTransport(*[LOST] * 4)
    messaging, slept = client(transport, retries=3)
    with pytest.raises(ServiceUnavailableError, match="connection reset") as raised:
        messaging.get_topic(T)
    assert isinstance(raised.value.__cause__, TransportError)
    assert slept == pytest.approx([0.1, 0.4, 1.6]) and len(transport.sent) == 4


def test_errors_that_retrying_cannot_mend_are_raised_at_once() -> None:
    transport = ScriptedTransport(error(404, "topic_not_found", "Topic ns:t does not exist."))
    messaging, slept = client(transport)
    with pytest.raises(TopicNotFoundError, match="does not exist") as raised:
        messaging.get_topic(T)
    assert raised.value.topic == T and slept == []
    transport = ScriptedTransport(error(400, "invalid_argument"))
    messaging, _ = client(transport)
    with pytest.raises(TmsInvalidArgumentError):
        messaging.update_topic(T, {"ttl": "x"})


def test_topics() -> None:
    transport = ScriptedTransport(ok(), ok(b'{"ttl":"5","generation":"1"}'), ok(b'["t","u"]'), ok())
    messaging, _ = client(transport)
    messaging.create_topic(T, {"ttl": "5"})
    assert messaging.get_topic(T) == {"ttl": "5", "generation": "1"}
    assert messaging.list_topics("ns") == ["t", "u"]
    messaging.delete_topic(T)
    assert [(s.method, s.path) for s in transport.sent] == [
        ("PUT", BASE),
        ("GET", BASE),
        ("GET", "/v1/namespaces/ns/topics"),
        ("DELETE", BASE),
    ]
    assert json.loads(transport.sent[0].body or b"") == {"ttl": "5"}


def test_rollback_sends_the_token_back_as_received() -> None:
    token_bytes = avro.encode_publish_response(RollbackDetail(42, 7, 0, 7, 1))
    transport = ScriptedTransport(ok(token_bytes), ok())
    messaging, _ = client(transport)
    token = messaging.publish(T, ["x"], tx_write_pointer=42)
    assert token is not None
    messaging.rollback(T, token)
    sent = transport.sent[1]
    assert (sent.path, sent.body) == (BASE + "/rollback", token_bytes)


def test_markers() -> None:
    details = (RollbackDetail(5, 1, 0, 1, 0), RollbackDetail(6, 1, 1, 1, 1))
    transport = ScriptedTransport(ok(jsonc.encode_markers_response(MarkersResult(details, True))))
    messaging, _ = client(transport)
    outcome = messaging.publish_markers(T, [5, 6], idempotency_key="job-1")
    assert outcome.duplicate and [t.detail for t in outcome.tokens] == list(details)
    assert jsonc.decode_markers_request(transport.sent[0].body or b"") == ((5, 6), "job-1")


def _poll_reply(messages: list[Message], *, held: bool = False) -> Reply:
    body = b"".join(avro.encode_consume_response(messages))
    return ok(body, **({"X-Tms-Held": "true"} if held else {}))


def _message(n: int) -> Message:
    return Message((n.to_bytes(8, "big") + bytes(12), b"m%d" % n))


def test_poll_sends_the_position_and_transaction_and_reads_held() -> None:
    reader = tx(10, 11)
    transport = ScriptedTransport(_poll_reply([_message(1)], held=True))
    messaging, _ = client(transport, timeout_s=5.0)
    result = messaging.poll(T, start=_message(0).id, limit=10, transaction=reader, wait_ms=2000)
    assert result.messages == [_message(1)] and result.held
    [sent] = transport.sent
    spec = avro.decode_consume_request(sent.body or b"")
    assert (spec.start_from, spec.inclusive, spec.limit) == (_message(0).id_bytes, True, 10)
    assert spec.transaction is not None and decode_transaction(spec.transaction) == reader
    # the wait is passed on, and the read may take that much longer
    assert sent.params == {"wait_ms": "2000"} and sent.timeout_s == pytest.approx(7.0)


class _Transactions:
    def __init__(self) -> None:
        self.started: list[Transaction] = []
        self.aborted: list[Transaction] = []

    def start_short(self, timeout_s: int | None = None) -> Transaction:
        started = tx(100 + len(self.started), 101 + len(self.started))
        self.started.append(started)
        return started

    def abort(self, transaction: Transaction) -> None:
        self.aborted.append(transaction)


def test_follow_reconnects_with_capped_backoff_and_resumes_after_the_last_message() -> None:
    # Given a service that answers, then is unreachable six times, then answers again
    transport = ScriptedTransport(
        _poll_reply([_message(1), _message(2)]), *[LOST] * 6, _poll_reply([_message(3)]), LOST
    )
    messaging, slept = client(transport, retries=0)
    # When following the topic for eight messages' worth of polls
    got = list(islice(messaging.follow(T, wait_ms=100), 3))
    # Then every message comes once, in order, and the pauses grow to 10 s at most
    assert got == [_message(1), _message(2), _message(3)]
    assert slept == pytest.approx([0.1, 0.4, 1.6, 6.4, 10.0, 10.0])
    third = avro.decode_consume_request(transport.sent[-1].body or b"")
    assert (third.start_from, third.inclusive) == (_message(2).id_bytes, False)


def test_follow_takes_a_new_transaction_when_held_and_waits_only_if_it_got_nowhere() -> None:
    transactions = _Transactions()
    transport = ScriptedTransport(
        _poll_reply([_message(1)], held=True),  # held after a message: new tx, no pause
        _poll_reply([], held=True),  # a fresh tx got nowhere: pause 10 ms
        _poll_reply([], held=True),  # and again: 20 ms
        _poll_reply([_message(2)]),
    )
    messaging, slept = client(transport)
    got = list(islice(messaging.follow(T, tx_client=transactions, tx_refresh_s=3600), 2))
    assert got == [_message(1), _message(2)]
    assert slept == pytest.approx([0.01, 0.02])
    assert len(transactions.started) == 4
    assert transactions.aborted == transactions.started  # each replaced one, then the last


# -- a cluster of instances --------------------------------------------------------------

A, B, C = "http://a:1", "http://b:1", "http://c:1"


def cluster_client(**transports: ScriptedTransport) -> MessagingClient:
    urls = {"a": A, "b": B, "c": C}
    return MessagingClient(
        [A, B, C],
        transport={urls[k]: t for k, t in transports.items()},
        sleep=lambda _s: None,
    )


def redirect(to: str, path: str) -> Reply:
    body = json.dumps({"error": "not_owner", "message": "elsewhere"}).encode()
    return Reply(307, "", {"Location": to + path}, body)


def test_a_write_follows_the_redirect_to_the_owner_and_remembers_it() -> None:
    a = ScriptedTransport(redirect(B, BASE + "/publish"))
    b = ScriptedTransport(ok(), ok())
    client = cluster_client(a=a, b=b)
    client.publish(T, [b"x"])
    client.publish(T, [b"y"])
    # the same request went to the owner, and the next one went there directly
    assert [s.path for s in a.sent] == [BASE + "/publish"]
    assert b.sent[0].body == a.sent[0].body
    assert avro.decode_publish_request(b.sent[1].body or b"") == (None, [b"y"])


def test_a_write_refused_by_a_deposed_owner_is_sent_again() -> None:
    # nothing was stored by the fenced instance: the write goes again, to the new owner
    a = ScriptedTransport(error(503, "fenced", "superseded"), redirect(B, BASE + "/publish"))
    b = ScriptedTransport(ok())
    cluster_client(a=a, b=b).publish(T, [b"x"])
    assert len(a.sent) == 2 and len(b.sent) == 1


def test_an_unreachable_instance_is_skipped_for_writes_never_sent() -> None:
    a = ScriptedTransport(TransportError("refused", sent=False))
    b = ScriptedTransport(ok(), ok(b"[]"))
    client = cluster_client(a=a, b=b)
    client.publish(T, [b"x"])
    assert len(b.sent) == 1
    client.list_topics("ns")  # and the client stays with the instance that answered
    assert len(a.sent) == 1 and len(b.sent) == 2


def test_a_write_whose_answer_was_lost_is_not_sent_to_another_instance() -> None:
    a = ScriptedTransport(TransportError("reset", sent=True))
    b = ScriptedTransport()
    with pytest.raises(ServiceUnavailableError):
        cluster_client(a=a, b=b).publish(T, [b"x"])
    assert b.sent == []


def test_reads_go_round_the_instances_until_one_answers() -> None:
    a = ScriptedTransport(TransportError("reset"))
    b = ScriptedTransport(TransportError("reset"))
    c = ScriptedTransport(ok(b'{"ttl": "1", "generation": "1"}'))
    assert cluster_client(a=a, b=b, c=c).get_topic(T)["generation"] == "1"
    assert MessagingClient("http://a:1, http://b:1/").urls == [A, B]
