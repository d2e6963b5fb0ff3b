"""txms from asyncio code, over the binary protocol (docs/rpc.md), in aiokafka's shapes.

* ``Producer``: ``async with Producer(url, tx_server=...)``, ``await publish(...)``,
  ``async with producer.transaction():``.
* ``Consumer``: ``async with Consumer(url, topic)``, ``async for message in consumer``,
  ``await consumer.getmany()``.
* ``Subscriber``: ``async with Subscriber(url, subscription)``, ``async for message in
  subscriber`` — a subscription read at-least-once, committing as it goes.
* ``SubscriptionConsumer``: a subscription read inside ``producer.transaction()``, its
  position written as part of it (exactly-once consume → publish).
* ``Queue``: a work queue's enqueue, receive, ack, nack (enqueue and ack inside a
  producer's transaction); ``Worker``: a coroutine per message, bounded concurrency.
* ``AsyncMessagingClient``: ``MessagingClient``'s methods as coroutines.
* ``AsyncTxClient``: the transaction calls a producer and a consumer need.
"""

from tms.aio.client import AsyncMessagingClient
from tms.aio.consumer import Consumer
from tms.aio.producer import Producer
from tms.aio.queue import Queue, Worker
from tms.aio.subconsumer import SubscriptionConsumer
from tms.aio.subscriber import Subscriber
from tms.aio.txclient import AsyncTxClient

__all__ = [
    "AsyncMessagingClient",
    "AsyncTxClient",
    "Consumer",
    "Producer",
    "Queue",
    "Subscriber",
    "SubscriptionConsumer",
    "Worker",
]
