"""The data source against servers that speak TLS: HTTPS with a private CA (``caBundle``)
and a transaction server that requires a client certificate (``txTlsCa``, ``txTlsCert``,
``txTlsKey``), for the tasks, the driver and the lease keeper that renews a job's
transaction."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack, running_stack
from tests.spark.test_write_read import committed, numbered
from tests.tls import Pki, make_pki
from tms.model import TopicId
from txn.config import TxConfig


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def stack(tmp_path: Path, pki: Pki) -> Iterator[Stack]:
    config = TxConfig(cleanup_interval_s=0.2, snapshot_interval_s=0)
    with running_stack(tmp_path / "stack", config, tls=pki) as running:
        yield running


def test_write_and_read_over_tls(spark: Any, stack: Stack, pki: Pki) -> None:
    # Given both servers behind TLS, the transaction server requiring a client certificate
    assert stack.url.startswith("https://")
    topic = TopicId("default", "secured")
    stack.messaging.create_topic(topic)
    tx_tls = {
        "txTlsCa": str(pki.ca_file),
        "txTlsCert": str(pki.cert_file),
        "txTlsKey": str(pki.key_file),
    }
    options = {**stack.options("secured"), "caBundle": str(pki.ca_file), **tx_tls}

    def slow(partition: int, attempt: int, row: int) -> None:
        if row == 0:
            time.sleep(3)  # longer than txTimeoutS: the keeper must renew over TLS

    # When a job longer than its transaction's timeout writes, and a query reads back
    df = numbered(spark, 200, slow)
    df.write.format("tms").mode("append").options(**options, txTimeoutS="2").save()
    read = spark.read.format("tms").options(**options).load()

    # Then every row is committed and read
    assert len(committed(stack, topic)) == 200
    assert sorted(bytes(r.payload) for r in read.collect()) == sorted(
        f"m{i}".encode() for i in range(200)
    )


def test_tls_is_checked(spark: Any, stack: Stack, pki: Pki) -> None:
    stack.messaging.create_topic(TopicId("default", "secured"))
    ca = {"caBundle": str(pki.ca_file)}
    tx_tls = {
        "txTlsCa": str(pki.ca_file),
        "txTlsCert": str(pki.cert_file),
        "txTlsKey": str(pki.key_file),
    }
    plain = stack.options("secured")
    # the messaging service's certificate, unchecked against the private CA
    with pytest.raises(Exception, match=r"(?i)certificate.verify.failed"):
        spark.read.format("tms").options(**plain, **tx_tls).load().collect()
    # no client certificate for a transaction server that requires one
    no_cert = {**plain, **ca, "txTlsCa": str(pki.ca_file)}
    with pytest.raises(Exception, match="transaction service at"):
        spark.read.format("tms").options(**no_cert).load().collect()
    # a certificate without its key is refused before anything connects
    half = {**plain, **ca, "txTlsCa": str(pki.ca_file), "txTlsCert": str(pki.cert_file)}
    with pytest.raises(Exception, match="txTlsCert"):
        spark.read.format("tms").options(**half).load().collect()
