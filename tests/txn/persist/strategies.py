"""Hypothesis strategies for persisted values."""

from __future__ import annotations

from hypothesis import strategies as st

from txn.persist.edit import TransactionEdit
from txn.state import InProgressTx, InProgressType, TransactionSnapshot
from txn.transaction import TransactionType

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
pointers = st.integers(min_value=0, max_value=2**62)
keys = st.binary(max_size=12)
change_sets = st.frozensets(keys, max_size=5)

edits = st.one_of(
    st.builds(TransactionEdit.started, pointers, pointers, longs, st.sampled_from(TransactionType)),
    st.builds(TransactionEdit.committing, pointers, change_sets),
    st.builds(TransactionEdit.committed, pointers, change_sets, pointers, st.booleans()),
    st.builds(
        TransactionEdit.aborted,
        pointers,
        st.none() | st.sampled_from(TransactionType),
        st.none() | st.lists(pointers, max_size=4).map(tuple),
    ),
    st.builds(TransactionEdit.invalid, pointers),
    st.builds(TransactionEdit.move_watermark, pointers),
    st.builds(TransactionEdit.truncate_invalid, st.frozensets(pointers, max_size=5)),
    st.builds(TransactionEdit.truncate_invalid_before, pointers),
    st.builds(TransactionEdit.checkpoint, pointers, pointers),
)

in_progress_entries = st.builds(
    InProgressTx,
    visibility_upper_bound=longs,
    expiration_ms=longs,
    type=st.sampled_from(InProgressType),
    checkpoint_write_pointers=st.lists(pointers, max_size=3).map(lambda xs: tuple(sorted(xs))),
)

snapshots = st.builds(
    TransactionSnapshot,
    timestamp_ms=pointers,
    read_pointer=longs,
    write_pointer=longs,
    invalid=st.frozensets(longs, max_size=10).map(lambda xs: tuple(sorted(xs))),
    in_progress=st.dictionaries(pointers, in_progress_entries, max_size=6).map(
        lambda d: dict(sorted(d.items()))
    ),
    committing=st.dictionaries(pointers, change_sets, max_size=4),
    committed=st.dictionaries(pointers, change_sets, max_size=4).map(
        lambda d: dict(sorted(d.items()))
    ),
)
