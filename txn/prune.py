"""Invalid-list pruning: Tephra's ``TransactionPruningService`` algorithm, run by the
transaction server itself. It is the only way ids leave the invalid list automatically.

Every store that holds data of transactions (the messaging service, an application's
table) is a *participant*: it knows up to which id invalid transactions no longer have
data in it (its cleanup removed or negated that data). Participants take part in one of
two ways:

* **in process**: a ``PrunePlugin`` object handed to the ``TransactionPruner`` (the
  standalone stack registers the messaging cleanup this way);
* **over the wire**: a name listed in the server's ``prune_participants``; the store
  reports its bound with the ``reportPruneUpperBound`` extension call (``txms``'s IDL,
  ``ThriftTxClient.report_prune_upper_bound``). Reports are kept in memory only: after a
  restart every named participant blocks pruning until it has reported again, so the set
  of participants never shrinks silently. A report from a name not listed is refused.

One run (``TransactionPruner.run_once``):

1. read the current invalid list (start and abort a short transaction);
2. ``inactive_bound = (now - (max_lifetime + grace)) * 1e6 - 1``: no transaction at or
   below it can still write (the manager refuses older writers, see ``max_lifetime_s``);
3. ask every participant for its prune upper bound; one that fails, or has no bound yet
   (<= 0, or a named participant that has not reported), stops the run;
4. truncate every invalid id ``<=`` the smallest bound (and never above the inactive
   bound), and tell the in-process plugins.

No participant at all: nothing is truncated. ``PruningService`` runs the pruner every
``prune_interval_s`` on a daemon thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from txms_common.clock import SYSTEM_CLOCK, Clock
from txms_common.periodic import PeriodicTask
from txn.errors import InvalidArgumentError
from txn.transaction import MAX_TX_PER_MS, Transaction

__all__ = [
    "PrunePlugin",
    "PruneRun",
    "PruningClient",
    "PruningService",
    "ReportedBounds",
    "TransactionPruner",
    "inactive_tx_bound",
]

log = logging.getLogger(__name__)


class PrunePlugin(Protocol):
    """A store that can say which invalid transactions no longer have data in it."""

    def fetch_prune_upper_bound(self, now_ms: int, inactive_tx_bound: int) -> int:
        """The largest id such that no invalid transaction at or below it has data here
        (never above ``inactive_tx_bound``); <= 0 for "none yet"."""
        ...

    def prune_complete(self, now_ms: int, max_pruned_invalid: int) -> None:
        """Invalid ids up to ``max_pruned_invalid`` were removed from the invalid list."""


class PruningClient(Protocol):
    """The part of a ``TxClient`` the pruner uses."""

    def start_short(self, timeout_s: int | None = None) -> Transaction: ...

    def abort(self, tx: Transaction) -> None: ...

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> bool: ...


def inactive_tx_bound(now_ms: int, lifetime_ms: int) -> int:
    """Largest id that can no longer write (Tephra's ``TxUtils.getInactiveTxBound``)."""
    return (now_ms - lifetime_ms) * MAX_TX_PER_MS - 1


class ReportedBounds:
    """The bounds of participants in other processes, by name (see the module docstring).
    Thread-safe."""

    def __init__(self, names: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._bounds: dict[str, int | None] = dict.fromkeys(names)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._bounds)

    def report(self, name: str, bound: int) -> None:
        """Record ``name``'s latest bound. Raises ``InvalidArgumentError`` for a name
        the server was not configured with."""
        with self._lock:
            if name not in self._bounds:
                known = ", ".join(sorted(self._bounds)) or "none"
                raise InvalidArgumentError(
                    f"{name!r} is not a pruning participant of this server (configured: "
                    f"{known}); add it to prune_participants"
                )
            self._bounds[name] = int(bound)

    def bound(self, name: str) -> int | None:
        """The last bound ``name`` reported since the server started, or None."""
        with self._lock:
            return self._bounds[name]

    def plugins(self) -> list[PrunePlugin]:
        """One plugin per named participant, answering its last report."""
        return [_Reported(self, name) for name in self._bounds]


class _Reported:
    """A named remote participant seen as a ``PrunePlugin``."""

    def __init__(self, registry: ReportedBounds, name: str) -> None:
        self._registry = registry
        self.name = name

    def fetch_prune_upper_bound(self, now_ms: int, inactive_tx_bound: int) -> int:
        bound = self._registry.bound(self.name)
        if bound is None:
            log.info(
                "invalid-list pruning: participant %r has not reported since the server "
                "started; nothing pruned",
                self.name,
            )
            return -1
        return min(bound, inactive_tx_bound)

    def prune_complete(self, now_ms: int, max_pruned_invalid: int) -> None:
        pass  # a remote participant learns nothing (Tephra's plugins only log it)


@dataclass(frozen=True, slots=True)
class PruneRun:
    """One finished pruning run: when (ms), how many ids it removed, the largest."""

    at_ms: int
    removed: int
    max_removed: int | None


class TransactionPruner:
    """Runs the algorithm of the module docstring; ``run_once`` is thread-safe.
    ``last_run`` is the last run that got to the end (None before the first)."""

    def __init__(
        self,
        client: PruningClient,
        plugins: Sequence[PrunePlugin],
        *,
        max_lifetime_s: int,
        grace_s: int,
        reported: ReportedBounds | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._client = client
        self.plugins = list(plugins)
        self.reported = reported if reported is not None else ReportedBounds(())
        self._lifetime_ms = (max_lifetime_s + grace_s) * 1000
        self._clock = clock
        self._lock = threading.Lock()
        self.last_run: PruneRun | None = None

    def report(self, participant: str, bound: int) -> None:
        """A remote participant's report (``ReportedBounds.report``)."""
        self.reported.report(participant, bound)

    def run_once(self) -> list[int]:
        """Prune once; return the ids removed from the invalid list."""
        with self._lock:
            pruned = self._run_once()
            self.last_run = PruneRun(self._clock.now_ms(), len(pruned), max(pruned, default=None))
            return pruned

    def _run_once(self) -> list[int]:
        plugins = [*self.plugins, *self.reported.plugins()]
        if not plugins:
            log.info("invalid-list pruning: no participants registered, nothing to do")
            return []
        client = self._client
        tx = client.start_short()
        client.abort(tx)
        if not tx.invalids:
            return []
        now = self._clock.now_ms()
        inactive = inactive_tx_bound(now, self._lifetime_ms)
        try:
            bounds = [p.fetch_prune_upper_bound(now, inactive) for p in plugins]
        except Exception:
            log.exception("invalid-list pruning: a participant failed; nothing pruned")
            return []
        # A participant's bound is trusted only up to the inactive bound: above it, a
        # transaction could still write.
        upper = min(*bounds, inactive)
        if upper <= 0:
            return []
        pruned = [i for i in tx.invalids if i <= upper]
        if not pruned:
            return []
        client.truncate_invalid_tx(pruned)
        log.info("invalid-list pruning: removed %d ids up to %d", len(pruned), max(pruned))
        for plugin in self.plugins:
            try:
                plugin.prune_complete(now, max(pruned))
            except Exception:
                log.exception("invalid-list pruning: prune_complete failed")
        return pruned


class PruningService:
    """Runs a ``TransactionPruner`` every ``interval_s`` seconds on a daemon thread (the
    first run after one interval)."""

    def __init__(self, pruner: TransactionPruner, interval_s: float) -> None:
        self.pruner = pruner
        self._task = PeriodicTask("txn-prune", interval_s, pruner.run_once, run_at_start=False)

    def start(self) -> None:
        self._task.start()

    def stop(self) -> None:
        self._task.stop()
