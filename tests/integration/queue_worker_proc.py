"""A queue worker process for the competing-consumer test: receives batches over HTTP
and acks them — most plainly, some inside a transaction that commits, some inside one
that aborts — logging every delivery and ack to a file (unbuffered: what a kill -9 cuts
off is only the line being written).

Log lines: ``R id attempt due_ms lease_expires_ms``, then per message of the batch
``A id attempt outcome`` (plain ack), ``C id attempt`` (acked in a committed
transaction) or ``X id attempt`` (acked in a transaction that was rolled back).

Usage: python -m tests.integration.queue_worker_proc URL TX_HOST:PORT NS TOPIC LOG SEED LEASE_MS
"""

from __future__ import annotations

import os
import random
import sys
import time

from tms.client import MessagingClient
from tms.client.queue import TransactionalQueue
from tms.model import TopicId
from tms.queues import AckOutcome
from txms_common.retry import RetryNTimes
from txn import TransactionContext
from txn.rpc.client import ThriftTxClient


def main() -> None:
    url, tx_address, namespace, topic, log_path, seed, lease_ms = sys.argv[1:8]
    queue_id = TopicId(namespace, topic)
    client = MessagingClient(url, retries=5, backoff_s=0.05)
    queue = client.queue(queue_id)
    host, port = tx_address.rsplit(":", 1)
    tx_client = ThriftTxClient((host, int(port)), retry=RetryNTimes(3), timeout_s=10)
    participant = TransactionalQueue(client)
    rng = random.Random(seed)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lease_s = int(lease_ms) / 1000
    while True:
        messages = queue.receive(100, lease_s=lease_s, wait_s=1)
        if not messages:
            continue
        os.write(
            log,
            "".join(
                f"R {m.id.hex()} {m.attempt} {m.due_ms} {m.lease_expires_ms}\n" for m in messages
            ).encode(),
        )
        time.sleep(rng.uniform(0, 0.2))  # the work (where most kills land)
        dice = rng.random()
        if dice < 0.05:
            tx = tx_client.start_short()
            participant.start_tx(tx)
            outcomes = participant.ack(queue_id, messages)
            participant.rollback_tx()
            tx_client.abort(tx)
            lines = [
                f"X {m.id.hex()} {m.attempt}\n"
                for m, o in zip(messages, outcomes, strict=True)
                if o is AckOutcome.PENDING
            ]
        elif dice < 0.15:
            with TransactionContext(tx_client, participant):
                outcomes = participant.ack(queue_id, messages)
            lines = [
                f"C {m.id.hex()} {m.attempt}\n"
                for m, o in zip(messages, outcomes, strict=True)
                if o is AckOutcome.PENDING
            ]
        else:
            outcomes = queue.ack(messages)
            lines = [
                f"A {m.id.hex()} {m.attempt} {o.value}\n"
                for m, o in zip(messages, outcomes, strict=True)
            ]
        os.write(log, "".join(lines).encode())


if __name__ == "__main__":
    main()
