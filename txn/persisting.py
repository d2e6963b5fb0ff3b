"""The persist step of a transaction: every participant's ``commit_tx``, some of them at
the same time (``TransactionContext`` calls ``persist_all``).

A participant that sets ``persists_concurrently = True`` (see ``txn.aware``) lets its
``commit_tx`` run on a worker thread while the others persist: the publish of a loop's
outputs and the write of its subscription's position are then two requests in flight at
once, and a transaction waits for the slower of them instead of for their sum. The rest
run in the calling thread, in the participants' order, and stop at the first failure, as
Tephra's do. ``persist_all`` returns only once every call it started has returned, so a
rollback never overlaps a persist still in flight.

The workers are one pool for the process (created on first use, made anew in a forked
child); with a single participant, or none that persists concurrently, nothing changes
threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from txn.aware import TransactionAware

__all__ = ["PersistOutcome", "persist_all", "persists_concurrently"]

WORKERS = 16  # persists of one process in flight on workers at once; more wait their turn


@dataclass(frozen=True)
class PersistOutcome:
    """One participant's ``commit_tx``: ``ok`` is its answer (False when it raised
    ``error``, or was not called because an earlier one in the calling thread failed)."""

    aware: TransactionAware
    ok: bool
    error: Exception | None = None
    called: bool = True


def persists_concurrently(aware: TransactionAware) -> bool:
    """Whether ``aware`` declared that its ``commit_tx`` may run on another thread."""
    try:
        return getattr(aware, "persists_concurrently", False) is True
    except Exception:
        return False


def _commit(aware: TransactionAware) -> PersistOutcome:
    try:
        return PersistOutcome(aware, bool(aware.commit_tx()))
    except Exception as exc:
        return PersistOutcome(aware, False, exc)


def persist_all(awares: Sequence[TransactionAware]) -> list[PersistOutcome]:
    """``commit_tx`` of each of ``awares`` (see the module docstring); the outcomes in the
    participants' order, every started call finished."""
    if len(awares) < 2:
        return _in_order(awares)
    spread = [a for a in awares if persists_concurrently(a)]
    here = [a for a in awares if not persists_concurrently(a)]
    if not spread:
        return _in_order(awares)
    if not here:
        here = [spread.pop()]  # the calling thread persists one itself
        if not spread:
            return _in_order(awares)
    pool = _pool()
    futures: dict[int, Future[PersistOutcome]] = {id(a): pool.submit(_commit, a) for a in spread}
    outcomes = {id(o.aware): o for o in _in_order(here)}
    for key, future in futures.items():
        outcomes[key] = future.result()
    return [outcomes[id(a)] for a in awares]


def _in_order(awares: Sequence[TransactionAware]) -> list[PersistOutcome]:
    outcomes: list[PersistOutcome] = []
    failed = False
    for aware in awares:
        if failed:
            outcomes.append(PersistOutcome(aware, False, called=False))
            continue
        outcome = _commit(aware)
        outcomes.append(outcome)
        failed = not outcome.ok
    return outcomes


_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(WORKERS, thread_name_prefix="txn-persist")
        return _POOL


def _forked() -> None:
    global _POOL, _LOCK
    _POOL, _LOCK = None, threading.Lock()  # the parent's workers do not exist here


os.register_at_fork(after_in_child=_forked)
