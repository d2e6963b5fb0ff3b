"""Transaction-aware publishing and fetching over the REST API (``txn.TransactionAware``).

``TransactionalPublisher``:

* outside a transaction, ``publish`` publishes at once;
* inside one (after ``start_tx``) it buffers, and ``commit_tx`` — called by the
  ``TransactionContext`` before the transaction commits — publishes each topic's buffer
  with the transaction's write pointer. Transactional consumers stop before those
  messages until the transaction commits, then see them all at once; if anything fails,
  ``rollback_tx`` rolls them back so they are never visible;
* ``staged=True`` is for long transactions with many messages: ``publish`` stores them in
  the payload table at once (nothing held in memory) and ``commit_tx`` publishes one
  commit marker per topic and write pointer. On rollback the markers are rolled back
  and the staged payloads age out.

A rollback it cannot prove makes ``rollback_tx`` return False, so the context
*invalidates* the transaction (Tephra's rule) instead of aborting it — an aborted write
pointer reads as committed, an invalid one stays hidden: when a publish, store or marker
failed without a definite answer (a timeout, a dropped connection, a 5xx: the service may
have written it), when a rollback call failed, and whenever payloads were staged (they
are never removed, so a later marker must never find them under an aborted pointer). A
4xx answer means the service changed nothing. After a staged ``store`` with no definite
answer, ``commit_tx`` refuses to commit (the messages might be there once, or not).

After the commit (``post_tx_commit``) the publisher tells the service that its
transaction finished (``notify_finished``; ``notify_finished=False`` does not), so
transactional readers held behind its messages read on at once. The word is a hint (the
service also finds out by itself, later): it is sent at once by a thread of its own
(``send_finished``), and the committing thread does not wait for its answer. Words still
queued when the process exits go out first (at most ``EXIT_DRAIN_S``);
``flush_finished`` sends them on demand (before closing the client, or ending a process
that skips the exit handlers, as a forked ``multiprocessing`` child does).

``commit_tx`` may run on a thread of the context's while other participants persist
(``persists_concurrently``, ``txn.persisting``): the outputs and a consumer's position
are written at once.

Message topics are append-only, so neither participant declares change keys (no
conflicts). After a checkpoint both continue under the new write pointer.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Collection, Iterable

from tms.client.http import MessagingClient, PollResult, RollbackToken
from tms.errors import ServiceUnavailableError, TmsError
from tms.ids import MessageId
from tms.model import TopicId
from txn.transaction import Transaction

__all__ = [
    "TransactionalFetcher",
    "TransactionalPublisher",
    "flush_finished",
    "notify_finished",
    "outcome_unknown",
    "send_finished",
]

log = logging.getLogger(__name__)


class TransactionalPublisher:
    """See the module docstring."""

    persists_concurrently = True  # its client is thread-safe; commit_tx touches only its own

    def __init__(
        self,
        client: MessagingClient,
        *,
        staged: bool = False,
        name: str = "tms-publisher",
        notify_finished: bool = True,
    ) -> None:
        self.client = client
        self.staged = staged
        self.name = name
        self.notify_finished = notify_finished
        self._tx: Transaction | None = None
        self._buffers: dict[TopicId, list[bytes]] = {}
        self._staged: set[tuple[TopicId, int]] = set()
        self._tokens: list[tuple[TopicId, RollbackToken]] = []
        self._in_doubt = False  # something may be stored that the tokens do not undo
        self._lost_store = False  # a staged store without a definite answer

    @property
    def transaction(self) -> Transaction | None:
        return self._tx

    def publish(self, topic: TopicId, payloads: Iterable[bytes | str]) -> None:
        """Publish now (no transaction), or as part of the current transaction."""
        data = [p.encode() if isinstance(p, str) else bytes(p) for p in payloads]
        tx = self._tx
        if tx is None:
            self.client.publish(topic, data)
        elif self.staged:
            try:
                self.client.store(topic, data, tx_write_pointer=tx.write_pointer)
            except BaseException as exc:
                if outcome_unknown(exc):
                    self._in_doubt = self._lost_store = True
                raise
            self._in_doubt = True  # staged rows stay: see the module docstring
            self._staged.add((topic, tx.write_pointer))
        else:
            self._buffers.setdefault(topic, []).extend(data)

    # -- TransactionAware ---------------------------------------------------------------

    def start_tx(self, tx: Transaction) -> None:
        self._reset()
        self._tx = tx

    def update_tx(self, tx: Transaction) -> None:
        self._tx = tx  # a checkpoint: commit_tx already published what came before

    def get_tx_changes(self) -> Collection[bytes]:
        return ()

    def commit_tx(self) -> bool:
        tx = self._tx
        if tx is None:
            return True
        if self._lost_store:
            raise TmsError(
                f"a store of transaction {tx.transaction_id} got no definite answer; "
                "its messages may or may not be there, so it must not commit"
            )
        for topic, payloads in list(self._buffers.items()):
            self._publish(topic, payloads, tx.write_pointer)
            del self._buffers[topic]
        for topic, write_pointer in sorted(self._staged, key=lambda k: (str(k[0]), k[1])):
            self._publish(topic, [], write_pointer)
        self._staged.clear()
        return True

    def _publish(self, topic: TopicId, payloads: list[bytes], write_pointer: int) -> None:
        try:
            token = self.client.publish(topic, payloads, tx_write_pointer=write_pointer)
        except BaseException as exc:
            self._in_doubt = self._in_doubt or outcome_unknown(exc)
            raise
        assert token is not None
        self._tokens.append((topic, token))

    def post_tx_commit(self) -> None:
        tokens = list(self._tokens)
        self._reset()
        if self.notify_finished and tokens:
            send_finished(self.client, tokens)

    def rollback_tx(self) -> bool:
        ok = not self._in_doubt
        try:
            for topic, token in self._tokens:
                try:
                    self.client.rollback(topic, token)
                except TmsError:
                    ok = False
        finally:
            self._reset()
        return ok

    def transaction_aware_name(self) -> str:
        return self.name

    def _reset(self) -> None:
        self._tx = None
        self._buffers.clear()
        self._staged.clear()
        self._tokens.clear()
        self._in_doubt = self._lost_store = False


class _Words:
    """The post-commit words of this process, sent in order by one daemon thread
    (started on first use): the words queued while one went out go out together, in
    one request per client and topic; at most ``MOST`` wait, the newer are dropped (hints: the
    service finds out by itself). ``drain`` waits for the words queued so far to go
    out; a forked child starts with none (its parent's are the parent's to send)."""

    MOST = 10_000
    BATCH = 1_000  # words sent at once: those queued while the last went out

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[
            tuple[MessagingClient, list[tuple[TopicId, RollbackToken]]]
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # queued, or being sent
        self._thread: threading.Thread | None = None

    def send(self, client: MessagingClient, tokens: list[tuple[TopicId, RollbackToken]]) -> None:
        with self._lock:
            if self._pending >= self.MOST:
                log.debug("too many words waiting: %d dropped", len(tokens))
                return
            self._pending += 1
            self._queue.put((client, tokens))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="tms-finished-words", daemon=True
                )
                self._thread.start()

    def drain(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the words queued so far to be sent (or to
        fail); whether none is left."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def _take(self) -> tuple[int, dict[MessagingClient, list[tuple[TopicId, RollbackToken]]]]:
        """Wait for a word, then take every word queued behind it too (at most
        ``BATCH``): how many were taken, and their tokens per client in queue order."""
        batch: dict[MessagingClient, list[tuple[TopicId, RollbackToken]]] = {}
        client, tokens = self._queue.get()
        taken = 1
        batch.setdefault(client, []).extend(tokens)
        while taken < self.BATCH:
            try:
                client, tokens = self._queue.get_nowait()
            except queue.Empty:
                break
            taken += 1
            batch.setdefault(client, []).extend(tokens)
        return taken, batch

    def _run(self) -> None:
        while True:
            taken, batch = self._take()
            try:
                for client, tokens in batch.items():
                    try:
                        notify_finished(client, tokens)
                    except Exception as exc:  # a client closed meanwhile: a hint is lost
                        log.debug("word of %d transactions not sent: %s", len(tokens), exc)
            finally:
                with self._idle:
                    self._pending -= taken
                    self._idle.notify_all()


_WORDS = _Words()
EXIT_DRAIN_S = 2.0  # how long a process's exit waits for its words (``flush_finished``)


def _forked() -> None:
    global _WORDS
    _WORDS = _Words()  # the parent's lock may have been held at the fork


os.register_at_fork(after_in_child=_forked)
atexit.register(lambda: _WORDS.drain(EXIT_DRAIN_S))


def send_finished(client: MessagingClient, tokens: Iterable[tuple[TopicId, RollbackToken]]) -> None:
    """``notify_finished`` from a thread of its own: returns at once. The words queued
    go out at the process's exit (waiting at most ``EXIT_DRAIN_S``); words still queued
    after that, or when the process ends without its exit handlers (killed, ``os._exit``
    as in a forked ``multiprocessing`` child), or whose client was closed before they
    went out, are lost — the service then finds out by itself (every
    ``held_recheck_ms``). Call ``flush_finished`` before closing the client or ending
    such a process to send them."""
    _WORDS.send(client, list(tokens))


def flush_finished(timeout_s: float = EXIT_DRAIN_S) -> bool:
    """Wait at most ``timeout_s`` for this process's words queued so far
    (``send_finished``) to go out; whether all did (or failed: a hint that cannot be
    sent is not retried)."""
    return _WORDS.drain(timeout_s)


def notify_finished(
    client: MessagingClient, tokens: Iterable[tuple[TopicId, RollbackToken]]
) -> None:
    """Tell the service the transactions of ``tokens`` finished (committed), per topic,
    so readers held behind them read on at once (``MessagingClient.transactions_finished``).
    Best effort: the transaction is committed whatever happens here, and the service
    also finds out by itself, later."""
    pointers: dict[TopicId, set[int]] = {}
    for topic, token in tokens:
        pointers.setdefault(topic, set()).add(token.detail.tx_write_pointer)
    for topic, wps in pointers.items():
        try:
            client.transactions_finished(topic, sorted(wps))
        except TmsError as exc:
            log.debug("could not tell the service that %s finished: %s", sorted(wps), exc)


def outcome_unknown(exc: BaseException) -> bool:
    """Whether a write that raised ``exc`` may have been stored after all: anything but
    an answer from the service that it refused the request (4xx: nothing changed)."""
    if isinstance(exc, ServiceUnavailableError):  # no answer (raised by the client)
        return True
    return not (isinstance(exc, TmsError) and 400 <= exc.status < 500)


class TransactionalFetcher:
    """Reads with the current transaction (everything, outside one)."""

    def __init__(self, client: MessagingClient, *, name: str = "tms-fetcher") -> None:
        self.client = client
        self.name = name
        self._tx: Transaction | None = None

    def fetch(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        limit: int | None = None,
        wait_ms: int = 0,
    ) -> PollResult:
        return self.client.poll(
            topic,
            start=start,
            inclusive=inclusive,
            limit=limit,
            transaction=self._tx,
            wait_ms=wait_ms,
        )

    def start_tx(self, tx: Transaction) -> None:
        self._tx = tx

    def update_tx(self, tx: Transaction) -> None:
        self._tx = tx

    def get_tx_changes(self) -> Collection[bytes]:
        return ()

    def commit_tx(self) -> bool:
        return True

    def post_tx_commit(self) -> None:
        self._tx = None

    def rollback_tx(self) -> bool:
        self._tx = None
        return True

    def transaction_aware_name(self) -> str:
        return self.name
