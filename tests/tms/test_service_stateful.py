"""The messaging service against a list model (LevelDB in a temp dir, with restarts).

The model is the topic as a list of entries in publish order: plain messages,
transactional messages, and commit markers that expand to the payloads stored under
their write pointer. Every read — non-transactional, or with a transaction built from the
model's transaction states — must return exactly what the model says, with strictly
increasing ids, and a read resumed from any returned id must return exactly the rest.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from tests.fakes import FakeClock
from tms.config import TmsConfig
from tms.errors import TmsInvalidArgumentError
from tms.fetcher import FetchRequest
from tms.model import Message, RollbackDetail, StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from txn.transaction import Transaction

T = TopicId("ns", "topic")
PAYLOADS = st.lists(st.binary(min_size=0, max_size=6), min_size=1, max_size=4)


@dataclass
class Entry:
    wp: int | None  # None: non-transactional
    payloads: list[bytes]
    rolled_back: bool = False


@dataclass
class Model:
    entries: list[Entry] = field(default_factory=list)
    stored: dict[int, list[bytes]] = field(default_factory=dict)
    sealed: dict[int, Entry] = field(default_factory=dict)


class ServiceMachine(RuleBasedStateMachine):
    details = Bundle("details")

    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tms-stateful-")
        self.clock = FakeClock(1_700_000_000_000)
        self.svc = self._open()
        self.svc.create_topic(T)
        self.model = Model()
        self.status: dict[int, str] = {}  # wp -> in_progress | committed | invalid
        self.covered: dict[RollbackDetail, list[Entry]] = {}  # what each token rolls back
        self.next_wp = 1_700_000_000_000 * 1_000_000

    def _open(self) -> MessagingService:
        return MessagingService(
            LevelDBStore(self.dir), TmsConfig(tx_max_lifetime_s=10**6), clock=self.clock
        )

    def teardown(self) -> None:
        self.svc.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- transactions -----------------------------------------------------------------

    def _in_progress(self) -> list[int]:
        return sorted(wp for wp, s in self.status.items() if s == "in_progress")

    @rule()
    def start_tx(self) -> None:
        self.next_wp += 1
        self.status[self.next_wp] = "in_progress"

    @rule(data=st.data(), outcome=st.sampled_from(["committed", "invalid"]))
    def finish_tx(self, data: st.DataObject, outcome: str) -> None:
        running = self._in_progress()
        if running:
            self.status[data.draw(st.sampled_from(running))] = outcome

    def _pick_running(self, data: st.DataObject) -> int | None:
        running = self._in_progress()
        return data.draw(st.sampled_from(running)) if running else None

    # -- writes -----------------------------------------------------------------------

    @rule(payloads=PAYLOADS, ms=st.integers(0, 3))
    def publish_plain(self, payloads: list[bytes], ms: int) -> None:
        self.clock.advance(ms)
        assert self.svc.publish(StoreRequest(T, payloads)) is None
        self.model.entries.extend(Entry(None, [p]) for p in payloads)

    @rule(target=details, data=st.data(), payloads=PAYLOADS)
    def publish_tx(self, data: st.DataObject, payloads: list[bytes]) -> RollbackDetail | None:
        wp = self._pick_running(data)
        if wp is None:
            return None
        detail = self.svc.publish(StoreRequest(T, payloads, tx_write_pointer=wp))
        entries = [Entry(wp, [p]) for p in payloads]
        self.model.entries.extend(entries)
        assert detail is not None
        self.covered[detail] = entries
        return detail

    @rule(data=st.data(), payloads=PAYLOADS)
    def store(self, data: st.DataObject, payloads: list[bytes]) -> None:
        wp = self._pick_running(data)
        if wp is None:
            return
        if wp in self.model.sealed:
            with pytest.raises(TmsInvalidArgumentError):
                self.svc.store(StoreRequest(T, payloads, tx_write_pointer=wp))
            return
        self.svc.store(StoreRequest(T, payloads, tx_write_pointer=wp))
        self.model.stored.setdefault(wp, []).extend(payloads)

    @rule(target=details, data=st.data())
    def publish_marker(self, data: st.DataObject) -> RollbackDetail | None:
        wp = self._pick_running(data)
        if wp is None:
            return None
        detail = self.svc.publish(StoreRequest(T, [], tx_write_pointer=wp))
        assert detail is not None
        existing = self.model.sealed.get(wp)
        if existing is None or existing.rolled_back:
            marker = Entry(wp, list(self.model.stored.get(wp, [])))
            self.model.entries.append(marker)
            self.model.sealed[wp] = marker
            self.covered[detail] = [marker]
        else:
            assert self.covered[detail] == [existing]  # the same token again
        return detail

    @rule(detail=details)
    def rollback(self, detail: RollbackDetail | None) -> None:
        if detail is None:
            return
        self.svc.rollback(T, detail)
        for entry in self.covered.get(detail, []):
            entry.rolled_back = True

    @rule()
    def delete_and_recreate(self) -> None:
        self.svc.delete_topic(T)
        self.svc.create_topic(T)
        self.model = Model()
        self.covered.clear()  # old tokens cover nothing in the new generation

    @rule()
    def restart(self) -> None:
        self.svc.close()
        self.clock.advance(-5)  # a restarted process whose clock is a little behind
        self.svc = self._open()

    # -- reads ------------------------------------------------------------------------

    def _read(self, tx: Transaction | None, **kw: object) -> list[Message]:
        return self.svc.fetch(T, FetchRequest(transaction=tx, **kw)).messages  # type: ignore[arg-type]

    def _expected(self, transactional: bool) -> list[bytes]:
        out: list[bytes] = []
        for entry in self.model.entries:
            if transactional and entry.wp is not None:
                if entry.rolled_back or self.status[entry.wp] == "invalid":
                    continue
                if self.status[entry.wp] == "in_progress":
                    break
            out.extend(entry.payloads)
        return out

    def _reader(self) -> Transaction:
        invalid = tuple(sorted(wp for wp, s in self.status.items() if s == "invalid"))
        return Transaction(
            transaction_id=self.next_wp + 10**6,
            read_pointer=self.next_wp,
            invalids=invalid,
            in_progress=tuple(self._in_progress()),
            write_pointer=self.next_wp + 10**6,
        )

    @invariant()
    def reads_match_the_model(self) -> None:
        for tx in (None, self._reader()):
            messages = self._read(tx)
            assert [m.payload for m in messages] == self._expected(tx is not None)
            ids = [m.id for m in messages]
            assert ids == sorted(set(ids)), "ids must strictly increase"
            if ids:
                k = len(ids) // 2
                rest = self._read(tx, start_id=ids[k], inclusive=False)
                assert [m.id for m in rest] == ids[k + 1 :]
                again = self._read(tx, start_id=ids[k])
                assert [m.id for m in again] == ids[k:]


ServiceMachine.TestCase.settings = settings(
    max_examples=max(100, settings().max_examples), stateful_step_count=30
)
TestServiceStateful = ServiceMachine.TestCase
