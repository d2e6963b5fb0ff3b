"""Write-pointer guards: only the transaction manager issues write pointers.

A transactional entry under a pointer the manager never issued (from the future, or
guessed) would hold every transactional reader of its topic for as long as it lives, and
a rollback under a guessed token could negate someone else's committed messages. So
before anything is written, ``MessagingService`` asks its guard about every write
pointer of a batch (``check``), each with its use:

* ``Use.WRITE`` — a transactional publish (with payloads, or empty: a commit marker) and
  a ``store``: the pointer must be **in progress** (a checkpoint's pointer counts);
* ``Use.MARKER`` — a pointer of the ``markers`` route: in progress, or issued and no
  longer in progress but **not invalid**. Spark's streaming sink commits its task
  transactions first and then publishes their markers in one keyed request (that
  request is its exactly-once commit point); such a marker is visible at once and holds
  no reader. Only ``store`` puts payloads under a pointer, and it needs the pointer in
  progress; a transaction that staged payloads and does not commit must be
  *invalidated*, not aborted (``TransactionalPublisher`` and the Spark sink do), so a
  late marker can never expose them;
* ``Use.ROLLBACK`` — the pointer must be in progress or invalid, never committed
  (answered from the manager's state at the time of the call, not a cache);
* ``Use.COMMITTED`` — a queue's settle after a commit (``tms.queues``): the pointer must
  have been issued, be no longer in progress and not be invalid (from a fresh state).

``outcomes`` tells, for write pointers a queue holds pending work of, which transactions
are settled: committed (True) or invalid (False); the others are still in progress or
not known. Tephra's rule makes "finished and not invalid" mean committed: an aborted
transaction rolled back its writes before it aborted, else it was invalidated.

**Writers' and readers' answers.** The manager applies a commit (or invalidation) in
memory before its log edit is durable. ``check`` asks for the immediate state: a pointer
that looks finished is refused, so a change not yet durable errs towards refusing —
except ``Use.COMMITTED``, which *allows* a pointer that looks committed and makes a
queue's messages visible: a batch with one asks for the durable state. ``outcomes`` and
``state`` decide what readers see, so they ask for the *durable* state
(``write_pointer_state(..., durable=True)``): answered once everything it shows is
durable, so a transaction they report committed cannot be lost by a crash of the
transaction server (aborted or unknown is never visible). Immediate and durable reads
are coalesced separately: a check never waits for the log.

``check`` returns, per use, None (allowed) or the ``TmsError`` to answer:
``TransactionNotInProgressError`` (409) or ``TransactionServiceError`` (503) when the
transaction service cannot be asked. It never raises for a refusal.

``state(pointers)`` is the manager's write-pointer state read after the call started
(``invalid`` covering ``pointers``), for judging what is committed now (subscription
positions, ``tms.positions``); None when the guard knows no transaction manager, and
``TransactionServiceError`` when it cannot be asked.

Guards:

* ``ClockGuard`` — no transaction service: refuses pointers from the future (past the
  service's clock plus ``skew_s``; write pointers are ``max(last + 1, now_ms * 10^6)``).
  A forged pointer within the allowance, a guessed past one, or a guessed rollback
  token are not detected;
* ``TransactionStateGuard`` — asks the transaction manager
  (``TxClient.write_pointer_state``), read-only. A state read at most ``max_age_s`` ago
  answers pointers it knows in progress, and refuses pointers it knows were issued and
  are not; a pointer newer than it (a transaction started since) triggers a refresh.
  Refreshes are coalesced: callers wait for one that *started after* they asked (so it
  knows every pointer issued before their request), and one call answers all of them.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tms.errors import TmsError, TransactionNotInProgressError, TransactionServiceError
from txms_common.clock import Clock
from txn.state import WritePointerState
from txn.transaction import MAX_TX_PER_MS

__all__ = [
    "ClockGuard",
    "TransactionStateGuard",
    "Use",
    "WritePointerGuard",
    "WritePointerSource",
]


class Use(enum.Enum):
    WRITE = "write"
    MARKER = "marker"
    ROLLBACK = "rollback"
    COMMITTED = "committed"


class WritePointerGuard(Protocol):
    """See the module docstring. Thread-safe."""

    def check(self, uses: Sequence[tuple[int, Use]]) -> list[TmsError | None]:
        """Per (write pointer, use), in order: None if allowed, else the error."""
        ...

    def outcomes(self, pointers: Collection[int]) -> dict[int, bool]:
        """Of ``pointers``, those whose transaction is settled: True committed, False
        invalid (see the module docstring). Never raises: unknown is left out."""

    def state(self, pointers: Collection[int] = ()) -> WritePointerState | None:
        """A fresh write-pointer state (see the module docstring)."""
        ...


class WritePointerSource(Protocol):
    """The part of ``txn.client.TxClient`` a ``TransactionStateGuard`` uses."""

    def write_pointer_state(
        self, pointers: Collection[int] = (), durable: bool = False
    ) -> WritePointerState: ...


def _refused(wp: int, use: Use) -> TransactionNotInProgressError:
    if use is Use.ROLLBACK:
        return TransactionNotInProgressError(
            f"rollback refused: transaction {wp} is neither in progress nor invalid "
            "(committed, aborted, or never issued)"
        )
    if use is Use.COMMITTED:
        return TransactionNotInProgressError(
            f"transaction {wp} is not committed (in progress, invalid, or never issued)"
        )
    return TransactionNotInProgressError(
        f"write pointer {wp} is not a transaction in progress (finished, or never issued "
        "by the transaction manager)"
    )


class ClockGuard:
    """See the module docstring."""

    def __init__(self, clock: Clock, skew_s: int) -> None:
        self._clock = clock
        self._skew_ms = skew_s * 1000

    def check(self, uses: Sequence[tuple[int, Use]]) -> list[TmsError | None]:
        limit = (self._clock.now_ms() + self._skew_ms + 1) * MAX_TX_PER_MS
        results: list[TmsError | None] = []
        for wp, use in uses:
            if use is not Use.ROLLBACK and (wp <= 0 or wp >= limit):
                results.append(
                    TransactionNotInProgressError(
                        f"write pointer {wp} was not issued by a transaction manager: it is "
                        "from the future (or not positive)"
                    )
                )
            else:
                results.append(None)
        return results

    def outcomes(self, pointers: Collection[int]) -> dict[int, bool]:
        return {}  # without a transaction service nothing is known

    def state(self, pointers: Collection[int] = ()) -> WritePointerState | None:
        return None  # no transaction manager to ask


@dataclass(slots=True)
class _Refresh:
    asks: set[int] = field(default_factory=set)
    started: float = 0.0
    state: WritePointerState | None = None
    error: Exception | None = None
    done: bool = False


class TransactionStateGuard:
    """See the module docstring."""

    def __init__(
        self,
        source: WritePointerSource,
        *,
        max_age_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._max_age_s = max_age_s
        self._monotonic = monotonic
        self._cond = threading.Condition(threading.Lock())
        self._state: WritePointerState | None = None
        self._state_at = 0.0  # when the request that read it was sent
        # per kind of read (durable or not): the refresh callers join, the one under way
        self._pending = {False: _Refresh(), True: _Refresh()}
        self._running: dict[bool, _Refresh | None] = {False: None, True: None}
        self.refreshes = 0
        """Calls made to the transaction service (for tests and metrics)."""

    def check(self, uses: Sequence[tuple[int, Use]]) -> list[TmsError | None]:
        results: list[TmsError | None] = [None] * len(uses)
        undecided: list[int] = []
        asks: set[int] = set()
        with self._cond:
            state = self._state
            if state is not None and self._monotonic() - self._state_at > self._max_age_s:
                state = None
        for i, (wp, use) in enumerate(uses):
            if use is Use.ROLLBACK or use is Use.COMMITTED:
                asks.add(wp)  # always from a fresh state
            elif state is not None and wp in state.in_progress:
                continue
            elif state is not None and wp <= state.write_pointer and use is Use.WRITE:
                results[i] = _refused(wp, use)
                continue
            elif use is Use.MARKER:
                asks.add(wp)
            undecided.append(i)
        if not undecided:
            return results
        durable = any(use is Use.COMMITTED for _, use in uses)
        try:
            fresh = self._refresh(asks, durable=durable)
        except Exception as exc:  # the transaction client's errors, mapped here
            error = TransactionServiceError(f"the transaction service cannot be asked: {exc}")
            for i in undecided:
                results[i] = error
            return results
        for i in undecided:
            wp, use = uses[i]
            if not _allowed(fresh, wp, use):
                results[i] = _refused(wp, use)
        return results

    def outcomes(self, pointers: Collection[int]) -> dict[int, bool]:
        if not pointers:
            return {}
        try:
            state = self._refresh(pointers, durable=True)
        except Exception:  # the transaction client's errors: nothing is known
            return {}
        return {
            wp: wp not in state.invalid
            for wp in pointers
            if 0 < wp <= state.write_pointer and wp not in state.in_progress
        }

    def state(self, pointers: Collection[int] = ()) -> WritePointerState | None:
        try:
            return self._refresh(pointers, durable=True)
        except Exception as exc:  # the transaction client's errors, mapped here
            raise TransactionServiceError(
                f"the transaction service cannot be asked: {exc}"
            ) from exc

    def _refresh(self, asks: Collection[int], *, durable: bool = False) -> WritePointerState:
        """A state read by a call that started after this one was made (see the module
        docstring), ``durable`` or not. Raises what the source raised (``TxError``)."""
        with self._cond:
            mine = self._pending[durable]
            mine.asks.update(asks)
            while not mine.done:
                if self._running[durable] is None:
                    self._running[durable], self._pending[durable] = mine, _Refresh()
                    mine.started = self._monotonic()
                    break
                self._cond.wait()
            else:
                if mine.error is not None:
                    raise mine.error
                assert mine.state is not None
                return mine.state
        try:
            mine.state = self._source.write_pointer_state(sorted(mine.asks), durable)
        except Exception as exc:
            mine.error = exc
        finally:
            with self._cond:
                self.refreshes += 1
                mine.done = True
                self._running[durable] = None
                if mine.state is not None and mine.started >= self._state_at:
                    self._state, self._state_at = mine.state, mine.started
                self._cond.notify_all()
        if mine.error is not None:
            raise mine.error
        assert mine.state is not None
        return mine.state


def _allowed(state: WritePointerState, wp: int, use: Use) -> bool:
    if use is Use.COMMITTED:
        return _committed(state, wp)
    if wp in state.in_progress:
        return True
    if use is Use.ROLLBACK:
        return wp in state.invalid
    if use is Use.MARKER:
        return 0 < wp <= state.write_pointer and wp not in state.invalid
    return False


def _committed(state: WritePointerState, wp: int) -> bool:
    return 0 < wp <= state.write_pointer and wp not in state.in_progress and wp not in state.invalid
