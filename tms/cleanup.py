"""Cleanup: expired rows, old generations, and entries of invalid transactions.

One run (``Cleaner.run_once``), for every topic row, deleted ones included:

1. **Old generations**: every data row of a generation below the topic's current one
   (all of them, for a deleted topic) is deleted.
2. **TTL**: message rows older than the topic's TTL are deleted (rows are time-ordered,
   so the scan stops at the first live one); payload rows by their write time; a commit
   marker's seal row with its marker; idempotency rows by the time they were written.
3. **Invalid transactions** (with a transaction client): read the invalid list from a
   fresh transaction, then negate every message entry still carrying one of those write
   pointers — it now reads as rolled back, and transactional consumers skip it for good.
   Only the time range where such entries can be is scanned (from the oldest invalid
   transaction's start, less ``cleanup_clock_skew_s``). Subscriptions' positions written
   under those pointers (``tms.positions``) are deleted.
4. **Positions nobody reads** (with a transaction client too): rows of transactional
   positions whose subscription is gone or whose stamp is no longer its state's
   (superseded by a seek or commit).

5. **Queues**: each queue's housekeeping (``MessagingService.maintain_queues``: expired
   leases, due messages, acked and dead messages past ``purge_after_s``); with a
   transaction client, queue work pending under finished transactions is settled
   (invalid: dropped; otherwise committed), and the prune bound stays below the oldest
   pointer still pending.

After step 3 every invalid id up to the *prune bound* is clean:
``B = min(inactive bound, read pointer, first in-progress - 1)``, where the inactive bound
is ``(now - (tx_max_lifetime + grace)) * 1e6 - 1``. Ids that old can no longer write —
the service refuses transactions past their lifetime — so no new entry can appear for
them, and an id below the oldest in-progress one was either covered by this run or never
invalid.

Cleanup never truncates the invalid list itself: other stores may still hold data of the
same transactions. It hands ``B`` to the transaction manager's pruning (``txn.prune``),
which truncates only below the bound of *every* participant: ``Cleaner`` is a
``txn.prune.PrunePlugin`` (in the same process), and with a ``participant`` name it
reports ``B`` to a transaction server in another process after each run
(``report_prune_upper_bound``). The instances of a cluster all report under one name:
each run covers the whole shared store (every topic's entries; pending queue work of
queues owned elsewhere holds ``B`` below it), so each report alone is a safe bound
(docs/operations.md, "The prune bound of a cluster").
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Protocol

from tms.errors import TmsError, TransactionServiceError
from tms.queues import SettleRequest
from tms.service import MessagingService
from txms_common.periodic import PeriodicTask
from txn.errors import TxError
from txn.transaction import MAX_TX_PER_MS, Transaction

__all__ = ["Cleaner", "CleanupLoop", "CleanupReport", "CleanupTxClient"]

log = logging.getLogger(__name__)


class CleanupTxClient(Protocol):
    """The part of ``txn.client.TxClient`` cleanup uses (``report_prune_upper_bound``:
    only with a participant name)."""

    def start_short(self, timeout_s: int | None = None) -> Transaction: ...

    def abort(self, tx: Transaction) -> None: ...

    def report_prune_upper_bound(self, participant: str, bound: int) -> None: ...


@dataclass
class CleanupReport:
    deleted_expired: int = 0
    deleted_old_generation: int = 0
    negated_invalid: int = 0
    prune_upper_bound: int = -1
    reported: bool = False
    """The bound was reported to the transaction server."""
    queue_messages: int = 0
    """Queue messages expired, settled, made due or purged (``maintain_queues``)."""


class Cleaner:
    """Runs cleanup through a service (see the module docstring). Thread-safe."""

    def __init__(
        self,
        service: MessagingService,
        tx_client: CleanupTxClient | None = None,
        *,
        grace_s: int | None = None,
        participant: str | None = None,
    ) -> None:
        """``grace_s`` defaults to the service's ``cleanup_grace_s``; ``participant``: the
        name to report the prune bound under (None: do not report)."""
        self._svc = service
        self._tx = tx_client
        self._grace_s = service.config.cleanup_grace_s if grace_s is None else grace_s
        self._participant = participant
        self._lock = threading.Lock()
        self._bound = -1

    # -- one run ------------------------------------------------------------------------

    def run_once(self) -> CleanupReport:
        with self._lock:
            report = CleanupReport()
            now = self._svc.now_ms()
            for metadata in self._svc.all_topics():
                purged = self._svc.purge_topic(metadata, now - metadata.ttl_s * 1000)
                report.deleted_expired += purged.expired
                report.deleted_old_generation += purged.old_generation
            # Queues: acked and dead messages past their retention, and housekeeping.
            report.queue_messages = self._svc.maintain_queues()
            if self._tx is not None:
                self._clean_invalid(now, report)
            m = self._svc.metrics
            m.cleanup_deleted.labels("expired").inc(report.deleted_expired)
            m.cleanup_deleted.labels("old_generation").inc(report.deleted_old_generation)
            m.cleanup_negated.inc(report.negated_invalid)
            m.prune_upper_bound.set(report.prune_upper_bound)
            log.info(
                "cleanup: %d expired and %d old-generation rows deleted, "
                "%d invalid entries negated, prune bound %d%s",
                report.deleted_expired,
                report.deleted_old_generation,
                report.negated_invalid,
                report.prune_upper_bound,
                " (reported)" if report.reported else "",
            )
            return report

    def _clean_invalid(self, now: int, report: CleanupReport) -> None:
        assert self._tx is not None
        try:
            snapshot = self._tx.start_short()
            self._tx.abort(snapshot)
        except TxError as exc:
            raise TransactionServiceError(f"cleanup cannot read the invalid list: {exc}") from exc
        invalid = frozenset(snapshot.invalids)
        if invalid:
            skew_ms = self._svc.config.cleanup_clock_skew_s * 1000
            from_ms = max(0, min(invalid) // MAX_TX_PER_MS - skew_ms)
            for metadata in self._svc.all_topics():
                if metadata.exists:
                    # Durable before any truncation may rely on it.
                    report.negated_invalid += self._svc.negate_invalid(metadata, invalid, from_ms)
        for metadata in self._svc.all_topics():
            if metadata.exists:
                report.negated_invalid += self._svc.subscriptions.clean_positions(metadata, invalid)
        lifetime_ms = (self._svc.config.tx_max_lifetime_s + self._grace_s) * 1000
        inactive = (now - lifetime_ms) * MAX_TX_PER_MS - 1
        bound = min(inactive, snapshot.read_pointer, snapshot.first_in_progress - 1)
        bound = min(bound, self._settle_queues(snapshot) - 1)
        self._bound = bound
        report.prune_upper_bound = bound
        if self._participant is not None and bound > 0:
            try:
                self._tx.report_prune_upper_bound(self._participant, bound)
            except TxError as exc:
                raise TransactionServiceError(
                    f"cleanup cannot report its prune bound as {self._participant!r}: {exc}"
                ) from exc
            report.reported = True

    def _settle_queues(self, snapshot: Transaction) -> int:
        """Settle queue work pending under finished transactions (invalid: dropped, else
        committed: an aborted transaction settled its own before it aborted); the oldest
        pointer still pending (the prune bound stays below it: truncated from the invalid
        list, an invalid pointer would read as committed)."""
        oldest = 2**63 - 1
        for topic, pointers in self._svc.pending_queue_pointers().items():
            try:
                here = self._svc.looks_after(topic)  # else its owner settles them
            except TmsError as exc:  # not known: leave them (the bound stays below)
                log.warning("cleanup cannot tell who owns %s: %s", topic, exc)
                here = False
            for wp in sorted(pointers):
                finished = wp < snapshot.write_pointer and not snapshot.is_in_progress(wp)
                if not finished or not here:
                    oldest = min(oldest, wp)
                    continue
                commit = wp not in snapshot.invalids
                try:
                    self._svc.settle(SettleRequest(topic, wp, commit))
                except TmsError as exc:
                    log.warning("cleanup could not settle %s of transaction %d: %s", topic, wp, exc)
                    oldest = min(oldest, wp)
        return oldest

    # -- txn.prune.PrunePlugin --------------------------------------------------------------

    def fetch_prune_upper_bound(self, now_ms: int, inactive_tx_bound: int) -> int:
        """The bound of the last completed run (never above ``inactive_tx_bound``)."""
        return min(self._bound, inactive_tx_bound)

    def prune_complete(self, now_ms: int, max_pruned_invalid: int) -> None:
        log.info("invalid ids up to %d were pruned", max_pruned_invalid)


class CleanupLoop:
    """Runs a ``Cleaner`` every ``interval_s`` on a daemon thread, and on demand."""

    def __init__(self, cleaner: Cleaner, interval_s: float) -> None:
        self.cleaner = cleaner
        self._task = PeriodicTask("tms-cleanup", interval_s, self._run)
        self.last_report: CleanupReport | None = None
        self.last_error: TmsError | None = None

    def _run(self) -> None:
        try:
            self.last_report = self.cleaner.run_once()
            self.last_error = None
        except TmsError as exc:
            self.last_error = exc
            log.warning("cleanup failed: %s", exc)

    def start(self) -> None:
        self._task.start()

    def stop(self) -> None:
        self._task.stop()
