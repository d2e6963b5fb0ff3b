"""A queue against a model (Hypothesis ``RuleBasedStateMachine``): enqueue (keys,
delays, priorities; in transactions that commit, roll back or are invalidated),
receive, ack (also stale receipts and acks in transactions), nack, time passing on an
injected clock, and restarts of the service on the same LevelDB directory. After every
step the counts per state match the model; every receive returns exactly the messages
the model says, in its order. ``DeadLetterModel`` runs the same with a dead-letter
queue: a message that fails its last attempt leaves the queue and is in the other one,
once, with its key and attempts (moves interrupted by restarts included).
``SmallWindowModel`` runs it with a ready window (``tms.queue_ready``) of two keys, so
receives keep going on from the window into the store."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.fakes import FakeClock
from tms import queue_ready
from tms.codec import keys
from tms.errors import TransactionNotInProgressError
from tms.guard import TransactionStateGuard
from tms.model import TopicId
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    QueueState,
    Receipt,
    ReceiveRequest,
    SettleRequest,
)
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from txn import InProcessTxClient, TransactionManager, TxConfig
from txn.transaction import Transaction

Q = TopicId("ns", "model")
DLQ = TopicId("ns", "model-dead")
LEASE_MS, MAX_ATTEMPTS, BACKOFF_MS = 1_000, 2, 1_000
S = QueueState


@dataclass(frozen=True)
class M:
    """A message in the model."""

    id: bytes
    state: QueueState
    priority: int
    due: int
    enqueued: int
    attempts: int = 0
    lease: int = 0
    tx: int = 0
    key: str | None = None


class QueueModel(RuleBasedStateMachine):
    dead_letters = False
    """Q has a dead-letter queue (``DeadLetterModel``)."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.clock = FakeClock(1_700_000_000_000)
        self.manager = TransactionManager(TxConfig(cleanup_interval_s=0))
        self.manager.start()
        self.txns = InProcessTxClient(self.manager)
        self.svc = self._open()
        dlq = {}
        if self.dead_letters:
            self.svc.create_topic(DLQ, {"kind": "queue"})
            dlq = {"dead_letter_queue": DLQ.topic}
        self.svc.create_topic(
            Q,
            {"kind": "queue", "max_attempts": str(MAX_ATTEMPTS), "jitter_percent": "0",
             "backoff_s": str(BACKOFF_MS // 1000), "max_backoff_s": "4", **dlq},
        )  # fmt: skip
        self.dead: list[tuple[str | None, int, int, int]] = []
        """Moved to the dead-letter queue: (key, attempts, priority, enqueue time)."""
        self.messages: dict[bytes, M] = {}
        self.keys: dict[str, bytes] = {}
        self.receipts: list[Receipt] = []
        self.open_txs: list[Transaction] = []
        self.outcome: dict[int, bool] = {}  # finished transactions: committed?

    def _open(self) -> MessagingService:
        guard = TransactionStateGuard(self.txns, max_age_s=0)
        return MessagingService(LevelDBStore(self.dir), clock=self.clock, guard=guard)

    def teardown(self) -> None:
        self.svc.close()
        self.manager.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model's housekeeping (tms.queue_batch) --------------------------------------

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def _waiting(self, m: M, due: int) -> M:
        state = S.READY if due <= self.now else S.SCHEDULED
        return replace(m, state=state, due=due, lease=0, tx=0)

    def _failed(self, m: M, delay: int | None) -> M:
        if m.attempts >= MAX_ATTEMPTS:
            return replace(m, state=S.MOVING if self.dead_letters else S.DEAD, lease=0, tx=0)
        if delay is None:
            failed_at = min(m.lease, self.now) if m.lease else self.now
            return self._waiting(m, failed_at + min(4_000, BACKOFF_MS * 2 ** (m.attempts - 1)))
        return self._waiting(m, self.now + delay)

    def _housekeeping(self) -> None:
        for m in list(self.messages.values()):
            if m.state is S.LEASED and not m.tx and m.lease <= self.now:
                self.messages[m.id] = self._failed(m, None)
        for m in list(self.messages.values()):
            if m.tx and m.tx in self.outcome:
                self._settle_one(m, self.outcome[m.tx])
        for m in list(self.messages.values()):
            if m.state is S.SCHEDULED and m.due <= self.now:
                self.messages[m.id] = replace(m, state=S.READY)

    def _settle_one(self, m: M, commit: bool) -> None:
        if m.state is S.PENDING:
            if commit:
                self.messages[m.id] = self._waiting(m, m.due)
            else:
                del self.messages[m.id]
                if m.key is not None:
                    del self.keys[m.key]
        elif commit:
            self.messages[m.id] = replace(m, state=S.ACKED, tx=0)
        else:
            self.messages[m.id] = replace(m, tx=0)

    # -- rules ----------------------------------------------------------------------------

    @rule(
        items=st.lists(
            st.tuples(
                st.none() | st.sampled_from(["a", "b", "c", "d"]),
                st.sampled_from([0, 0, 500, 3_000]),
                st.sampled_from([0, 1, 2]),
            ),
            min_size=1,
            max_size=4,
            unique_by=lambda t: t[0] or object(),
        ),
        in_tx=st.booleans(),
    )
    def enqueue(self, items: list[tuple[str | None, int, int]], in_tx: bool) -> None:
        tx = self.open_txs[-1] if in_tx and self.open_txs else None
        wp = tx.write_pointer if tx else 0
        request = EnqueueRequest(
            Q, [EnqueueItem(b"x", key=k, delay_ms=d, priority=p) for k, d, p in items], wp or None
        )
        conflict = any(
            k in self.keys
            and self.messages[self.keys[k]].state is S.PENDING
            and self.messages[self.keys[k]].tx != wp
            for k, _d, _p in items
        )
        try:
            results = self.svc.enqueue(request)
        except TransactionNotInProgressError:
            assert conflict
            return
        assert not conflict
        for (key, delay, priority), result in zip(items, results, strict=True):
            assert result.duplicate == (key is not None and key in self.keys)
            if result.duplicate:
                assert key is not None and result.id == self.keys[key]
                continue
            m = M(result.id, S.PENDING, priority, self.now + delay, self.now, tx=wp, key=key)
            self.messages[result.id] = m if wp else self._waiting(m, m.due)
            if key is not None:
                self.keys[key] = result.id

    @rule(n=st.integers(1, 5))
    def receive(self, n: int) -> None:
        got = self.svc.receive(ReceiveRequest(Q, n, LEASE_MS)).messages
        self._housekeeping()
        ready = sorted(
            (m for m in self.messages.values() if m.state is S.READY),
            key=lambda m: (m.priority, m.due, m.id),
        )[:n]
        assert [g.id for g in got] == [m.id for m in ready]
        for g, m in zip(got, ready, strict=True):
            assert g.attempt == m.attempts + 1
            self.messages[m.id] = replace(
                m, state=S.LEASED, attempts=m.attempts + 1, lease=self.now + LEASE_MS
            )
            self.receipts.append(g.receipt)

    def _ack_outcome(self, r: Receipt, wp: int) -> AckOutcome:
        m = self.messages.get(r.id)
        if m is None or m.state is S.PENDING:
            return AckOutcome.UNKNOWN
        if m.state is S.ACKED:
            return AckOutcome.ACKED
        if m.attempts != r.attempt or m.state is S.MOVING:
            return AckOutcome.LEASE_LOST
        if m.state is S.LEASED and m.tx:
            return AckOutcome.PENDING if m.tx == wp else AckOutcome.LEASE_LOST
        return AckOutcome.PENDING if wp else AckOutcome.ACKED

    @precondition(lambda self: self.receipts)
    @rule(data=st.data(), in_tx=st.booleans())
    def ack(self, data: st.DataObject, in_tx: bool) -> None:
        receipt = data.draw(st.sampled_from(self.receipts))
        tx = self.open_txs[-1] if in_tx and self.open_txs else None
        wp = tx.write_pointer if tx else 0
        [outcome] = self.svc.ack(AckRequest(Q, [receipt], wp or None))
        assert outcome is self._ack_outcome(receipt, wp)
        m = self.messages.get(receipt.id)
        if m is None or outcome not in (AckOutcome.ACKED, AckOutcome.PENDING):
            return
        if m.state is S.ACKED or (m.state is S.LEASED and m.tx == wp != 0):
            return
        if wp:
            lease = m.lease if m.state is S.LEASED else self.now
            self.messages[m.id] = replace(m, state=S.LEASED, lease=lease, tx=wp)
        else:
            self.messages[m.id] = replace(m, state=S.ACKED, tx=0)

    @precondition(lambda self: self.receipts)
    @rule(data=st.data(), delay=st.none() | st.sampled_from([0, 700]))
    def nack(self, data: st.DataObject, delay: int | None) -> None:
        receipt = data.draw(st.sampled_from(self.receipts))
        [outcome] = self.svc.nack(NackRequest(Q, [receipt], delay))
        m = self.messages.get(receipt.id)
        if m is None or m.state is S.PENDING:
            assert outcome is AckOutcome.UNKNOWN
        elif m.state is S.ACKED:
            assert outcome is AckOutcome.ACKED
        elif m.state is not S.LEASED or m.attempts != receipt.attempt or m.tx:
            assert outcome is AckOutcome.LEASE_LOST
        else:
            new = self._failed(replace(m, lease=0), delay)
            self.messages[m.id] = new
            dead = new.state in (S.DEAD, S.MOVING)
            assert outcome is (AckOutcome.DEAD if dead else AckOutcome.RETURNED)

    @rule(ms=st.sampled_from([1, 400, 1_000, 5_000]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @precondition(lambda self: len(self.open_txs) < 2)
    @rule()
    def start_tx(self) -> None:
        self.open_txs.append(self.txns.start_short())

    @precondition(lambda self: self.open_txs)
    @rule(how=st.sampled_from(["commit", "rollback", "invalidate"]))
    def finish_tx(self, how: str) -> None:
        tx = self.open_txs.pop(0)
        wp = tx.write_pointer
        if how == "commit":
            self.txns.commit_or_throw(tx)
            self.outcome[wp] = True
            return
        if how == "rollback":
            self.svc.settle(SettleRequest(Q, wp, commit=False))
            for m in [m for m in self.messages.values() if m.tx == wp]:
                self._settle_one(m, False)
            self.txns.abort(tx)
        else:
            self.txns.invalidate(tx.transaction_id)
            self.outcome[wp] = False

    @rule()
    def restart(self) -> None:
        self.svc.close()
        self.svc = self._open()

    def _moved(self) -> None:
        """The moves to the dead-letter queue done (cleanup's part; the service's own
        mover may be doing them at the same time)."""
        self.svc.move_dead_letters(Q)
        for m in [m for m in self.messages.values() if m.state is S.MOVING]:
            del self.messages[m.id]
            if m.key is not None:
                del self.keys[m.key]
            self.dead.append((m.key, m.attempts, m.priority, m.enqueued))

    @invariant()
    def counts_match(self) -> None:
        self.svc.queue_stats(Q)  # its housekeeping (may make messages MOVING)
        self._housekeeping()
        self._moved()  # after which nothing is MOVING: the mover cannot race the counts
        # The counts as stored now (a second stats call would run housekeeping again)
        generation = self.svc.get_topic(Q).generation
        stored = self.svc._tables.queues.counters(keys.topic_prefix(Q, generation))
        counts = {state: 0 for state in S}
        for m in self.messages.values():
            counts[m.state] += 1
        assert stored == tuple(counts[s] for s in S if s is not S.MOVING)
        report = self.svc.inspect(Q)
        assert {bytes.fromhex(r["id"]): r["state"] for r in report["messages"]} == {
            i: m.state.name.lower() for i, m in self.messages.items()
        }
        if self.dead_letters:
            moved = self.svc.inspect(DLQ)["messages"]
            assert all(r["state"] == "ready" for r in moved)
            assert sorted(
                ((r["key"], r["attempts"], r["priority"], r["enqueueTime"]) for r in moved),
                key=repr,
            ) == sorted(self.dead, key=repr)  # each exactly once


class DeadLetterModel(QueueModel):
    dead_letters = True


class SmallWindowModel(QueueModel):
    def __init__(self) -> None:
        self.max_keys = queue_ready.MAX_KEYS
        queue_ready.MAX_KEYS = 2
        super().__init__()

    def teardown(self) -> None:
        queue_ready.MAX_KEYS = self.max_keys
        super().teardown()


QueueModel.TestCase.settings = settings(max_examples=120, stateful_step_count=50, deadline=None)
DeadLetterModel.TestCase.settings = settings(max_examples=60, stateful_step_count=50, deadline=None)
SmallWindowModel.TestCase.settings = settings(
    max_examples=40, stateful_step_count=50, deadline=None
)
test_queue_against_a_model = QueueModel.TestCase
test_dead_letters_against_a_model = DeadLetterModel.TestCase
test_small_ready_window_against_a_model = SmallWindowModel.TestCase
