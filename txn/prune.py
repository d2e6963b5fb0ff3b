"""Invalid-list pruning: Tephra's ``TransactionPruningService`` algorithm.

Storage layers that know when an invalid transaction's writes are gone (``tms`` cleanup
negates or deletes them) register a ``PrunePlugin``. One run:

1. read the current invalid list (start and abort a short transaction);
2. ``inactive_bound = (now - (max_lifetime + grace)) * 1e6 - 1``: no transaction at or
   below it can still write (the manager refuses older writers, see ``max_lifetime_s``);
3. ask every plugin for its prune upper bound (an id at or below which it holds no data
   of invalid transactions); any plugin failing stops the run;
4. truncate every invalid id ``<=`` the smallest bound, and tell the plugins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

from txn.clock import SYSTEM_CLOCK, Clock
from txn.transaction import MAX_TX_PER_MS, Transaction

__all__ = ["PrunePlugin", "PruningClient", "TransactionPruner", "inactive_tx_bound"]

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


class TransactionPruner:
    """Runs the algorithm of the module docstring; ``run_once`` is thread-safe."""

    def __init__(
        self,
        client: PruningClient,
        plugins: Sequence[PrunePlugin],
        *,
        max_lifetime_s: int,
        grace_s: int,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._client = client
        self.plugins = list(plugins)
        self._lifetime_ms = (max_lifetime_s + grace_s) * 1000
        self._clock = clock
        self._lock = threading.Lock()

    def run_once(self) -> list[int]:
        """Prune once; return the ids removed from the invalid list."""
        with self._lock:
            if not self.plugins:
                log.info("invalid-list pruning: no plugins registered, nothing to do")
                return []
            client = self._client
            tx = client.start_short()
            client.abort(tx)
            if not tx.invalids:
                return []
            now = self._clock.now_ms()
            bound = inactive_tx_bound(now, self._lifetime_ms)
            try:
                bounds = [p.fetch_prune_upper_bound(now, bound) for p in self.plugins]
            except Exception:
                log.exception("invalid-list pruning: a plugin failed; nothing pruned")
                return []
            upper = min(bounds)
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
