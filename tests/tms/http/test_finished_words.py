"""The post-commit words (``tms.client.aware.send_finished``) still queued when a process
exits go out before it ends (within ``EXIT_DRAIN_S``), and ``flush_finished`` sends them
on demand."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.tms.helpers import tx
from tests.tms.http.conftest import Served
from tests.tms.http.test_held_wakeup import T, held_poll
from tms.client import MessagingClient
from tms.client.aware import flush_finished, send_finished
from tms.http.app import HttpConfig

CHILD = """
import sys
from tms.client import MessagingClient
from tms.client.aware import send_finished
import tms.client.aware as aware
from tms.model import TopicId

aware.EXIT_DRAIN_S = 30.0
url, slow_url, wp = sys.argv[1], sys.argv[2], int(sys.argv[3])
topic = TopicId("ns1", "t")
client = MessagingClient(url)
token = client.publish(topic, [b"in tx"], tx_write_pointer=wp)
send_finished(MessagingClient(slow_url), [(topic, token)])  # the thread is busy a while
send_finished(client, [(topic, token)])  # still queued when the script ends
"""


@pytest.fixture
def slow_url() -> Iterator[str]:
    """A loopback address that accepts connections and closes each after 0.5 s without
    answering (a service that is slow to answer: fault injection)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            time.sleep(0.5)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    listener.close()


def test_words_still_queued_go_out_when_the_process_exits(make_server: Any, slow_url: str) -> None:
    # Given a reader held behind a transaction (the service never asks the manager)
    served: Served = make_server(HttpConfig(port=0, held_recheck_ms=60_000))
    served.service.create_topic(T)
    wp = served.clock.now_ms() * 1_000_000
    poll = held_poll(served, wp, "poll")
    # When a process publishes in that transaction, queues its word behind a slow one
    # and ends at once
    subprocess.run([sys.executable, "-c", CHILD, served.url, slow_url, str(wp)], check=True)
    # Then its word reached the service before it ended: the reader is woken
    answer = poll.get(timeout_s=10)
    assert answer.headers["X-Tms-Held-Finished"] == "true"


def test_flush_finished_waits_for_the_queued_words(make_server: Any, slow_url: str) -> None:
    served: Served = make_server(HttpConfig(port=0, held_recheck_ms=60_000))
    served.service.create_topic(T)
    wp = served.clock.now_ms() * 1_000_000
    with MessagingClient(served.url) as client, MessagingClient(slow_url) as slow:
        token = client.publish(T, [b"in tx"], tx_write_pointer=wp)
        assert token is not None
        send_finished(slow, [(T, token)])  # the thread is busy a while
        send_finished(client, [(T, token)])
        assert flush_finished(30.0)
        # Then the word is with the service when the flush returns: a reader held behind
        # the transaction learns at once (it is answered before its wait is up)
        reader = tx(wp - 10, wp + 10, in_progress=(wp,))
        answer = client.poll(T, transaction=reader, wait_ms=100)
        assert answer.held and answer.held_finished


def _finished_requests(served: Served) -> float:
    metrics = served.http.get(f"{served.url}/metrics").text
    for line in metrics.splitlines():
        if line.startswith("tms_http_requests_total{") and "/finished" in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_words_queued_while_one_goes_out_go_out_together(make_server: Any, slow_url: str) -> None:
    # Given the words' thread busy sending to a slow service
    served: Served = make_server(HttpConfig(port=0, held_recheck_ms=60_000))
    served.service.create_topic(T)
    wp = served.clock.now_ms() * 1_000_000
    poll = held_poll(served, wp, "poll")
    with MessagingClient(served.url) as client, MessagingClient(slow_url) as slow:
        tokens = [client.publish(T, [b"in tx"], tx_write_pointer=wp + i) for i in range(20)]
        words = [(T, token) for token in tokens if token is not None]
        assert len(words) == 20
        send_finished(slow, words[:1])
        # When twenty transactions' words are queued behind it, one at a time
        for word in words:
            send_finished(client, [word])
        assert flush_finished(30.0)
    # Then they reached the service in one request for the topic, and woke the reader
    assert _finished_requests(served) == 1
    assert poll.get(timeout_s=10).headers["X-Tms-Held-Finished"] == "true"
