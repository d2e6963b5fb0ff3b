"""Subscriptions against a model (Hypothesis' ``RuleBasedStateMachine``): a real
``MessagingService`` on LevelDB with a real transaction manager in process, beside a
model of the topic (entries with their ids and transactions) and of each subscription's
position.

Rules: publish (plainly or in a transaction), finish transactions (commit, abort after
rollback, invalidate), create subscriptions (earliest or latest, transactional or not),
poll and commit, consume inside a transaction that commits, aborts or is invalidated,
seek, delete the topic (a new generation), restart the service. After every step each
subscription's position is the model's, a read from it returns exactly what the model
says (stopping where a transactional reader must stop), and its lag is exact.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tms.config import TmsConfig
from tms.fetcher import FetchRequest
from tms.guard import TransactionStateGuard
from tms.ids import MessageId
from tms.model import RollbackDetail, StoreRequest, TopicId
from tms.positions import change_key
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.subscription import (
    EARLIEST,
    Preferences,
    Start,
    SubscriptionId,
    after,
    after_entry,
)
from txn import InProcessTxClient, TransactionManager, TxConfig
from txn.transaction import Transaction

T = TopicId("ns", "topic")
NAMES = st.sampled_from(["a", "b", "c"])


@dataclass
class Entry:
    id: MessageId
    payload: bytes
    wp: int | None  # None: non-transactional


@dataclass
class Sub:
    transactional: bool
    position: MessageId


@dataclass
class Model:
    entries: list[Entry] = field(default_factory=list)
    subs: dict[str, Sub] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)  # wp -> open|committed|rolled back|invalid


class SubscriptionMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tms-subs-stateful-")
        self.manager = TransactionManager(TxConfig())
        self.manager.start()
        self.tx = InProcessTxClient(self.manager)
        self.svc = self._open()
        self.svc.create_topic(T)
        self.model = Model()
        self.open: dict[int, Transaction] = {}
        self.details: dict[int, list[RollbackDetail]] = {}
        self.counter = 0

    def _open(self) -> MessagingService:
        guard = TransactionStateGuard(self.tx, max_age_s=0)
        return MessagingService(LevelDBStore(self.dir), TmsConfig(), guard=guard)

    def teardown(self) -> None:
        self.svc.close()
        self.manager.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the topic ------------------------------------------------------------------------

    def _learn_ids(self, payloads: list[bytes], wp: int | None) -> None:
        """The ids the service gave the entries just written (the newest ones)."""
        everything = self.svc.fetch(T, FetchRequest()).messages
        for message in everything[len(everything) - len(payloads) :]:
            self.model.entries.append(Entry(message.id, message.payload, wp))

    def _payloads(self, n: int) -> list[bytes]:
        self.counter += n
        return [str(self.counter - n + i).encode() for i in range(n)]

    @rule(n=st.integers(1, 3))
    def publish(self, n: int) -> None:
        payloads = self._payloads(n)
        self.svc.publish(StoreRequest(T, payloads))
        self._learn_ids(payloads, None)

    @precondition(lambda self: len(self.open) < 2)
    @rule()
    def begin(self) -> None:
        tx = self.tx.start_short()
        self.open[tx.write_pointer] = tx
        self.model.status[tx.write_pointer] = "open"

    @precondition(lambda self: self.open)
    @rule(data=st.data(), n=st.integers(1, 2))
    def publish_in_transaction(self, data: st.DataObject, n: int) -> None:
        wp = data.draw(st.sampled_from(sorted(self.open)))
        payloads = self._payloads(n)
        detail = self.svc.publish(StoreRequest(T, payloads, tx_write_pointer=wp))
        assert detail is not None
        self._learn_ids(payloads, wp)
        self.details.setdefault(wp, []).append(detail)

    @precondition(lambda self: self.open)
    @rule(data=st.data(), outcome=st.sampled_from(["committed", "rolled back", "invalid"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        wp = data.draw(st.sampled_from(sorted(self.open)))
        tx = self.open.pop(wp)
        if outcome == "committed":
            self.tx.can_commit_or_throw(tx, [])
            self.tx.commit_or_throw(tx)
        elif outcome == "rolled back":
            for detail in self.details.pop(wp, []):
                self.svc.rollback(T, detail)
            self.tx.abort(tx)
        else:
            self.tx.invalidate(tx.transaction_id)
        self.model.status[wp] = outcome

    @rule()
    def delete_topic(self) -> None:
        self.svc.delete_topic(T)
        self.svc.create_topic(T)
        self.model.entries.clear()
        self.model.subs.clear()

    @rule()
    def restart(self) -> None:
        self.svc.close()
        self.svc = self._open()

    # -- what the model expects -------------------------------------------------------------

    def _fresh(self) -> Transaction:
        tx = self.tx.start_short()
        self.tx.abort(tx)
        return tx

    def _expected(
        self, sub: Sub, start: MessageId, limit: int = 10**6
    ) -> tuple[list[bytes], MessageId, bool]:
        """(payloads, next position, held) of a read from ``start``."""
        out: list[bytes] = []
        position = start
        for entry in self.model.entries:
            if entry.id < start:
                continue
            status = self.model.status.get(entry.wp, "plain") if entry.wp else "plain"
            if sub.transactional and status == "open":
                return out, max(start, MessageId(entry.id.publish_ms, entry.id.seq)), True
            if sub.transactional and status in ("rolled back", "invalid"):
                position = after_entry(entry.id.publish_ms, entry.id.seq)
                continue
            out.append(entry.payload)
            if len(out) == limit:
                return out, after(entry.id), False
            position = after_entry(entry.id.publish_ms, entry.id.seq)
        return out, max(start, position), False

    def _lag(self, sub: Sub) -> int:
        """Entries from the position on that were not rolled back."""
        return sum(
            1
            for e in self.model.entries
            if e.id >= sub.position and self.model.status.get(e.wp or 0) != "rolled back"
        )

    def _latest(self, transactional: bool) -> MessageId:
        """Where a subscription starting (or seeking) latest goes."""
        for entry in self.model.entries if transactional else ():
            if entry.wp and self.model.status[entry.wp] == "open":
                return MessageId(entry.id.publish_ms, entry.id.seq)
        if not self.model.entries:
            return EARLIEST
        last = self.model.entries[-1].id
        return after_entry(last.publish_ms, last.seq)

    # -- subscriptions ----------------------------------------------------------------------

    @rule(name=NAMES, transactional=st.booleans(), latest=st.booleans())
    def create(self, name: str, transactional: bool, latest: bool) -> None:
        sub = SubscriptionId(T, name)
        if name in self.model.subs:
            return
        start = Start.latest() if latest else Start.earliest()
        created = self.svc.subscriptions.create(sub, Preferences(start, transactional))
        expected = self._latest(transactional) if latest else EARLIEST
        assert created.position == expected
        self.model.subs[name] = Sub(transactional, expected)

    def _pick(self, data: st.DataObject) -> tuple[str, Sub] | None:
        if not self.model.subs:
            return None
        name = data.draw(st.sampled_from(sorted(self.model.subs)))
        return name, self.model.subs[name]

    @rule(data=st.data(), limit=st.integers(1, 4))
    def poll_and_commit(self, data: st.DataObject, limit: int) -> None:
        picked = self._pick(data)
        if picked is None:
            return
        name, sub = picked
        sid = SubscriptionId(T, name)
        reader = self._fresh() if sub.transactional else None
        poll = self.svc.subscriptions.read(sid, limit=limit, transaction=reader)
        payloads, position, held = self._expected(sub, sub.position, limit)
        assert [m.payload for m in poll.messages] == payloads
        assert (poll.position, poll.held) == (position, held)
        self.svc.subscriptions.commit(sid, poll.position, poll.version, reader)
        sub.position = position

    @rule(
        data=st.data(),
        limit=st.integers(1, 4),
        outcome=st.sampled_from(["commit", "abort", "invalidate"]),
    )
    def consume_in_a_transaction(self, data: st.DataObject, limit: int, outcome: str) -> None:
        picked = self._pick(data)
        if picked is None:
            return
        name, sub = picked
        sid = SubscriptionId(T, name)
        tx = self.tx.start_short()
        poll = self.svc.subscriptions.read(sid, limit=limit, transaction=tx)
        payloads, position, _held = self._expected(sub, sub.position, limit)
        assert [m.payload for m in poll.messages] == payloads
        self.svc.subscriptions.commit_in_transaction(sid, poll.position, poll.version, tx)
        if outcome == "commit":
            self.tx.can_commit_or_throw(tx, [change_key(sid)])
            self.tx.commit_or_throw(tx)
            sub.position = position
        elif outcome == "abort":
            self.svc.subscriptions.rollback_in_transaction(sid, [tx.write_pointer])
            self.tx.abort(tx)
        else:
            self.tx.invalidate(tx.transaction_id)

    @rule(data=st.data(), latest=st.booleans())
    def seek(self, data: st.DataObject, latest: bool) -> None:
        picked = self._pick(data)
        if picked is None:
            return
        name, sub = picked
        sid = SubscriptionId(T, name)
        version = self.svc.subscriptions.get(sid, lag=False).version
        moved = self.svc.subscriptions.seek(
            sid, Start.latest() if latest else Start.earliest(), version
        )
        assert moved.position == (self._latest(sub.transactional) if latest else EARLIEST)
        sub.position = moved.position

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def positions_reads_and_lag_match_the_model(self) -> None:
        if not hasattr(self, "model"):
            return
        listed = {s.id.name: s for s in self.svc.subscriptions.list(T)}
        assert set(listed) == set(self.model.subs)
        for name, sub in self.model.subs.items():
            found = listed[name]
            assert found.position == sub.position
            assert found.lag is not None and found.lag.exact
            assert found.lag.messages == self._lag(sub)
            reader = self._fresh() if sub.transactional else None
            poll = self.svc.subscriptions.read(found.id, transaction=reader)
            payloads, position, held = self._expected(sub, sub.position)
            assert [m.payload for m in poll.messages] == payloads
            assert (poll.position, poll.held) == (position, held)


TestSubscriptions = SubscriptionMachine.TestCase
TestSubscriptions.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
