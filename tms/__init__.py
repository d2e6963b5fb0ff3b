"""txms messaging: topics, transactional publishing and consumption.

The public API, importable from ``tms`` itself::

    from tms import MessagingService, LevelDBStore, TopicId, StoreRequest, FetchRequest

* the service and its stores: ``MessagingService`` (``FetchResult``), ``TmsConfig``,
  ``LevelDBStore``, ``MemoryStore``, ``PostgresStore``;
* values: ``TopicId``, ``TopicMetadata``, ``StoreRequest``, ``MarkersRequest``,
  ``MarkersResult``, ``RollbackDetail``, ``TopicBounds``, ``FetchRequest``, ``Message``,
  ``MessageId``;
* write operations (``MessagingService.submit``): ``Publish``, ``Store``, ``Rollback``,
  ``Markers``, ``WritePosition``, ``RollbackPosition``, the queue operations ``Enqueue``,
  ``Receive``, ``Ack``, ``Nack``, ``Settle``, ``Maintain``, and ``Operation``, ``Ticket``;
* subscriptions (``MessagingService.subscriptions``): ``SubscriptionId``,
  ``Preferences``, ``Start``, ``Subscription``, ``Lag``, and the metadata store's
  contract ``SubscriptionStore`` with ``KvSubscriptionStore``;
* queues (docs/queues.md): ``EnqueueItem``, ``EnqueueRequest``, ``Enqueued``,
  ``ReceiveRequest``, ``ReceiveResult``, ``QueueMessage``, ``Receipt``, ``AckRequest``,
  ``NackRequest``, ``AckOutcome``, ``SettleRequest``, ``QueueStats``, ``QueueConfig``;
* the client: ``MessagingClient`` (more in ``tms.client``);
* the error tree rooted at ``TmsError`` (``tms.errors``).

Names load on first use, so ``import tms.errors`` (or the command line) does not pay
for the service or the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tms import errors as _errors
from txms_common.lazy import lazy_names

if TYPE_CHECKING:
    from tms.client import MessagingClient as MessagingClient
    from tms.config import TmsConfig as TmsConfig
    from tms.errors import *  # noqa: F403  (the error tree, named by its __all__)
    from tms.fetcher import FetchRequest as FetchRequest
    from tms.ids import MessageId as MessageId
    from tms.model import MarkersRequest as MarkersRequest
    from tms.model import MarkersResult as MarkersResult
    from tms.model import Message as Message
    from tms.model import RollbackDetail as RollbackDetail
    from tms.model import StoreRequest as StoreRequest
    from tms.model import TopicBounds as TopicBounds
    from tms.model import TopicId as TopicId
    from tms.model import TopicMetadata as TopicMetadata
    from tms.operations import Ack as Ack
    from tms.operations import Enqueue as Enqueue
    from tms.operations import Maintain as Maintain
    from tms.operations import Markers as Markers
    from tms.operations import Nack as Nack
    from tms.operations import Operation as Operation
    from tms.operations import Publish as Publish
    from tms.operations import Receive as Receive
    from tms.operations import Rollback as Rollback
    from tms.operations import RollbackPosition as RollbackPosition
    from tms.operations import Settle as Settle
    from tms.operations import Store as Store
    from tms.operations import Ticket as Ticket
    from tms.operations import WritePosition as WritePosition
    from tms.queues import AckOutcome as AckOutcome
    from tms.queues import AckRequest as AckRequest
    from tms.queues import Enqueued as Enqueued
    from tms.queues import EnqueueItem as EnqueueItem
    from tms.queues import EnqueueRequest as EnqueueRequest
    from tms.queues import NackRequest as NackRequest
    from tms.queues import QueueConfig as QueueConfig
    from tms.queues import QueueMessage as QueueMessage
    from tms.queues import QueueStats as QueueStats
    from tms.queues import Receipt as Receipt
    from tms.queues import ReceiveRequest as ReceiveRequest
    from tms.queues import ReceiveResult as ReceiveResult
    from tms.queues import SettleRequest as SettleRequest
    from tms.service import FetchResult as FetchResult
    from tms.service import MessagingService as MessagingService
    from tms.store.leveldb import LevelDBStore as LevelDBStore
    from tms.store.memory import MemoryStore as MemoryStore
    from tms.store.postgres import PostgresStore as PostgresStore
    from tms.store.subscriptions import KvSubscriptionStore as KvSubscriptionStore
    from tms.store.subscriptions import SubscriptionStore as SubscriptionStore
    from tms.subscription import Lag as Lag
    from tms.subscription import Preferences as Preferences
    from tms.subscription import Start as Start
    from tms.subscription import Subscription as Subscription
    from tms.subscription import SubscriptionId as SubscriptionId

_HOMES = {
    "tms.client": ("MessagingClient",),
    "tms.config": ("TmsConfig",),
    "tms.errors": tuple(n for n in _errors.__all__ if n.endswith("Error")),
    "tms.fetcher": ("FetchRequest",),
    "tms.ids": ("MessageId",),
    "tms.model": (
        "MarkersRequest",
        "MarkersResult",
        "Message",
        "RollbackDetail",
        "StoreRequest",
        "TopicBounds",
        "TopicId",
        "TopicMetadata",
    ),
    "tms.operations": (
        "Ack",
        "Enqueue",
        "Maintain",
        "Markers",
        "Nack",
        "Operation",
        "Publish",
        "Receive",
        "Rollback",
        "RollbackPosition",
        "Settle",
        "Store",
        "Ticket",
        "WritePosition",
    ),
    "tms.queues": (
        "AckOutcome",
        "AckRequest",
        "EnqueueItem",
        "EnqueueRequest",
        "Enqueued",
        "NackRequest",
        "QueueConfig",
        "QueueMessage",
        "QueueStats",
        "Receipt",
        "ReceiveRequest",
        "ReceiveResult",
        "SettleRequest",
    ),
    "tms.service": (
        "FetchResult",
        "MessagingService",
    ),
    "tms.store.leveldb": ("LevelDBStore",),
    "tms.store.memory": ("MemoryStore",),
    "tms.store.postgres": ("PostgresStore",),
    "tms.store.subscriptions": (
        "KvSubscriptionStore",
        "SubscriptionStore",
    ),
    "tms.subscription": (
        "Lag",
        "Preferences",
        "Start",
        "Subscription",
        "SubscriptionId",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
# Every name of the table and only those; type checkers read the imports above.
__all__ = sorted(_HOME_OF)  # noqa: PLE0605
__getattr__, __dir__ = lazy_names("tms", _HOME_OF, globals())
