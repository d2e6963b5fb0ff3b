"""txms from asyncio code, over the binary protocol (docs/rpc.md), in aiokafka's shapes.

* ``Producer``: ``async with Producer(url, tx_server=...)``, ``await publish(...)``,
  ``async with producer.transaction():``.
* ``Consumer``: ``async with Consumer(url, topic)``, ``async for message in consumer``,
  ``await consumer.getmany()``.
* ``AsyncMessagingClient``: ``MessagingClient``'s methods as coroutines.
* ``AsyncTxClient``: the transaction calls a producer and a consumer need.
"""

from tms.aio.client import AsyncMessagingClient
from tms.aio.consumer import Consumer
from tms.aio.producer import Producer
from tms.aio.txclient import AsyncTxClient

__all__ = ["AsyncMessagingClient", "AsyncTxClient", "Consumer", "Producer"]
