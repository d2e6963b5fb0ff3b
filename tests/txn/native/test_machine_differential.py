"""The native state machine against the Python one: random sequences of every transition
(ids from a small pool, so that they collide, repeat and hit unknown transactions), with
every query and the whole snapshot compared after each step."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from txn import native
from txn.errors import CorruptStateError
from txn.machine import TxStateMachine
from txn.persist.edit_codec import encode_changes
from txn.state import TransactionSnapshot
from txn.transaction import TransactionType

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built")

ids = st.integers(min_value=0, max_value=24)
types = st.sampled_from([TransactionType.SHORT, TransactionType.LONG])
keys = st.frozensets(st.sampled_from([b"", b"a", b"ab", b"b", b"\x00", b"\xff" * 3]), max_size=4)
clients = st.sampled_from([None, "x", "client-y"])


class BothMachines(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        from txn.native.machine import NativeStateMachine

        self.py = TxStateMachine()
        self.c = NativeStateMachine()

    def both(self, name: str, *args: object) -> object:
        """Run ``name`` on both; same result, or the same exception type."""
        outcomes = []
        for machine in (self.py, self.c):
            try:
                outcomes.append(("ok", getattr(machine, name)(*args)))
            except CorruptStateError as exc:
                outcomes.append(("error", type(exc)))
        assert outcomes[0] == outcomes[1], (name, args, outcomes)
        return outcomes[0][1]

    @rule(pointer=ids)
    def reset(self, pointer: int) -> None:
        self.both("reset", pointer)

    @rule(wp=ids, vub=ids, expiration=st.integers(-2, 30), tx_type=types, client=clients)
    def start(
        self, wp: int, vub: int, expiration: int, tx_type: TransactionType, client: str | None
    ) -> None:
        self.both("do_start", wp, vub, expiration, tx_type, client)

    @rule(tx=ids, changes=keys, client=clients, ahead=st.booleans())
    def committing(
        self, tx: int, changes: frozenset[bytes], client: str | None, ahead: bool
    ) -> None:
        # a large set arrives encoded ahead of the state lock (edit_codec.encode_changes)
        encoded = encode_changes(changes) if ahead else None
        self.both("do_committing", tx, changes, client, encoded)

    @rule(tx=ids, changes=keys, pointer=ids, add=st.booleans())
    def commit(self, tx: int, changes: frozenset[bytes], pointer: int, add: bool) -> None:
        self.both("do_commit", tx, changes, pointer, add)

    @rule(
        tx=ids,
        checkpoints=st.none() | st.lists(ids, max_size=3).map(tuple),
        tx_type=st.none() | types,
    )
    def abort(
        self, tx: int, checkpoints: tuple[int, ...] | None, tx_type: TransactionType | None
    ) -> None:
        self.both("do_abort", tx, checkpoints, tx_type)

    @rule(tx=ids)
    def invalidate(self, tx: int) -> None:
        self.both("do_invalidate", tx)

    @rule(new=ids, parent=ids)
    def checkpoint(self, new: int, parent: int) -> None:
        self.both("do_checkpoint", new, parent)

    @rule(tx=ids, expiration=st.integers(-2, 30))
    def extend(self, tx: int, expiration: int) -> None:
        self.both("do_extend", tx, expiration)

    @rule(tx_ids=st.frozensets(ids, max_size=4))
    def truncate(self, tx_ids: frozenset[int]) -> None:
        self.both("do_truncate_invalid", tx_ids)

    @rule(time_ms=st.integers(-1, 1) | st.sampled_from([2**62, -(2**62)]))
    def truncate_before(self, time_ms: int) -> None:
        # ids are tiny, so only a bound of 0 ms or more (0 ns...) separates them
        self.both("do_truncate_invalid_before", time_ms)

    @rule(data=st.data())
    def restore_from_snapshot(self, data: st.DataObject) -> None:
        snapshot = self.py.snapshot(0)
        long_timeout = data.draw(st.integers(1, 5))
        self.both("restore", snapshot, long_timeout, 10_000)

    @invariant()
    def same_state(self) -> None:
        py_snapshot: TransactionSnapshot = self.py.snapshot(7)
        assert py_snapshot == self.c.snapshot(7)
        assert list(py_snapshot.in_progress) == list(self.c.snapshot(7).in_progress)
        assert self.py.read_pointer == self.c.read_pointer
        assert self.py.last_write_pointer == self.c.last_write_pointer
        assert self.py.first_short_in_progress() == self.c.first_short_in_progress()
        assert self.py.in_progress_count() == self.c.in_progress_count()
        assert self.py.invalid_count() == self.c.invalid_count()
        for now in (-1, 5, 40):
            assert sorted(self.py.timed_out(now)) == self.c.timed_out(now)
            assert self.py.next_write_pointer(now) == self.c.next_write_pointer(now)
        for tx in range(25):
            assert self.py.entry(tx) == self.c.entry(tx)
            py_entry, c_entry = self.py.entry(tx), self.c.entry(tx)
            assert (py_entry and py_entry.client_id) == (c_entry and c_entry.client_id)
            assert self.py.is_invalid(tx) == self.c.is_invalid(tx)
            assert self.py.in_progress_before(tx) == self.c.in_progress_before(tx)
            py_set, c_set = self.py.committing_changes(tx), self.c.committing_changes(tx)
            assert (py_set and (py_set.changes, py_set.client_id)) == (
                c_set and (c_set.changes, c_set.client_id)
            )
            if c_set is not None:  # the native set is kept encoded, as an edit writes it
                assert c_set.encoded == encode_changes(c_set.changes)
            for changes in (frozenset({b"a"}), frozenset({b"b", b"ab", b"\xff" * 3})):
                assert self.py.find_conflict(tx, changes) == self.c.find_conflict(tx, changes)
            for tx_type in TransactionType:
                assert self.py.create_transaction(tx, tx_type) == self.c.create_transaction(
                    tx, tx_type
                )


BothMachines.TestCase.settings = settings(max_examples=300, stateful_step_count=40)
test_native_machine_matches_the_python_one = BothMachines.TestCase
