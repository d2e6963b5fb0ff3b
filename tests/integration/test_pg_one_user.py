"""Two ``tms serve`` processes not in a cluster on one PostgreSQL database: the second
refuses to start (the write connection's advisory lock, ``tms.store.postgres.db``), the
first keeps serving, and once the first is gone a new instance starts."""

from __future__ import annotations

import sys

import pytest

from tms.client import MessagingClient
from tms.model import TopicId
from txms_testing import ServiceProcess

pytestmark = pytest.mark.timeout(180)


def _serve(url: str, name: str) -> ServiceProcess:
    argv = [sys.executable, "-m", "tms.cli", "serve", "--port", "0", "--store", url]
    return ServiceProcess(argv, name).start()


def test_a_second_unclustered_instance_on_one_database_refuses_to_start(pg_url: str) -> None:
    # Given one instance serving a database
    first = _serve(pg_url, "first")
    try:
        url = first.wait_for(r"listening on (http://[\d.]+:\d+)", 60).group(1)
        topic = TopicId("ns", "t")
        with MessagingClient(url) as client:
            client.create_topic(topic)
            client.publish(topic, [b"one"])
        # When a second one is started on the same database
        second = _serve(pg_url, "second")
        try:
            code = second.proc.wait(60) if second.proc is not None else None
            # Then it exits with an error that says why, and the first is unharmed
            assert code not in (0, None), second.output()
            assert "in use by another tms instance" in second.output()
            assert "Traceback" not in second.output()
        finally:
            second.kill()
        with MessagingClient(url) as client:
            client.publish(topic, [b"two"])
            assert [m.payload for m in client.poll(topic).messages] == [b"one", b"two"]
    finally:
        first.kill()
    # And once the first is gone (killed: its session's lock goes with it), one starts
    third = _serve(pg_url, "third")
    try:
        third.wait_for(r"listening on", 60)
    finally:
        third.stop()
