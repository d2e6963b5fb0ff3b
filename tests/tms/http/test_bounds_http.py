"""``POST .../bounds`` with a limit, over HTTP: the JSON fields ``counted`` and
``afterLimit``, through ``MessagingClient`` and as raw JSON."""

from __future__ import annotations

from tests.tms.http.conftest import Served
from tms.client import MessagingClient
from tms.ids import MessageId
from tms.model import TopicId

T = TopicId("ns", "bounded")


def test_bounds_with_a_limit(served: Served) -> None:
    client = MessagingClient(served.url)
    client.create_topic(T)
    client.publish(T, ["a", "b"])
    client.store(T, ["s1", "s2", "s3"], tx_write_pointer=42)
    client.publish_markers(T, [42])
    ids = [m.id for m in client.poll(T).messages]
    assert len(ids) == 5

    bounds = client.bounds(T, limit=3)
    assert (bounds.counted, bounds.after_limit) == (3, ids[3])  # inside the marker
    assert client.bounds(T, limit=10).counted == 5
    assert client.bounds(T, limit=10).after_limit is None
    assert client.bounds(T).counted is None

    raw = served.http.post(
        f"{served.url}/v1/namespaces/ns/topics/bounded/bounds",
        json={"startFrom": ids[1].hex, "inclusive": False, "limit": 1},
    ).json()
    marker = ids[2]
    assert raw == {
        "first": {
            "id": MessageId(marker.publish_ms, marker.seq).hex,
            "publishTime": marker.publish_ms,
            "sequenceId": marker.seq,
        },
        "last": {
            "id": MessageId(marker.publish_ms, marker.seq).hex,
            "publishTime": marker.publish_ms,
            "sequenceId": marker.seq,
        },
        "held": None,
        "counted": 1,
        "afterLimit": ids[3].hex,
    }
    client.close()
