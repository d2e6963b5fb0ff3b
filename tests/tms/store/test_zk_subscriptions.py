"""What the ZooKeeper subscription store adds to the contract
(``tests/tms/store/test_subscription_store.py``): its errors when the ensemble cannot be
used, and its layout, on the real ensemble."""

from __future__ import annotations

import itertools

import pytest

from tms.cluster.ownership import connect
from tms.errors import StorageUnavailableError
from tms.ids import MessageId
from tms.model import TopicId
from tms.store.zookeeper import ZkSubscriptionStore
from tms.subscription import Preferences, SubscriptionData, SubscriptionId, SubscriptionState
from txms_testing import ZooKeeperEnsemble

SUB = SubscriptionId(TopicId("ns", "t"), "s")
DATA = SubscriptionData(Preferences(), SubscriptionState(MessageId(1, 0), 1, 2, 3))
_bases = itertools.count(1)


def test_a_closed_session_is_storage_unavailable(zk_ensemble: ZooKeeperEnsemble) -> None:
    client = connect(zk_ensemble.connect_string, 10.0)
    store = ZkSubscriptionStore(client, f"/zksubs{next(_bases)}")
    version = store.create(SUB, DATA)
    client.stop()
    try:
        for call in (
            lambda: store.read(SUB),
            lambda: store.create(SubscriptionId(SUB.topic, "other"), DATA),
            lambda: store.write(SUB, DATA, version),
            lambda: store.delete(SUB, version),
            lambda: store.list(SUB.topic),
        ):
            with pytest.raises(StorageUnavailableError):
                call()
    finally:
        client.close()


def test_a_topic_node_goes_with_its_last_record(zk_ensemble: ZooKeeperEnsemble) -> None:
    base = f"/zksubs{next(_bases)}"
    client = connect(zk_ensemble.connect_string, 10.0)
    try:
        store = ZkSubscriptionStore(client, base)
        other = SubscriptionId(SUB.topic, "other")
        first, second = store.create(SUB, DATA), store.create(other, DATA)
        assert sorted(client.get_children(f"{base}/ns.t")) == ["other", "s"]
        store.delete(SUB, first)
        assert client.exists(f"{base}/ns.t") is not None
        store.delete(other, second)
        assert client.exists(f"{base}/ns.t") is None
        assert store.list(SUB.topic) == []
        assert store.create(SUB, DATA) == 1  # and made again when needed
    finally:
        client.stop()
        client.close()
