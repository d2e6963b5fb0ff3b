"""``TransactionExecutor``: run a function in a transaction, retrying on conflict.

Each attempt uses a fresh ``TransactionContext`` over the same participants: start, call
the function, finish. A function that raises aborts the attempt with
``TransactionFailureError("Transaction function failure for transaction. ")`` (the
function's exception as the cause). Whether to try again is the retry strategy's call:
by default up to 20 retries, 100 ms apart, and only on ``TransactionConflictError``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import ParamSpec, Protocol, TypeVar

from txn.aware import TransactionAware
from txn.client import TxClient
from txn.context import TransactionContext
from txn.errors import TransactionConflictError, TransactionFailureError

__all__ = ["NoRetries", "RetryOnConflict", "RetryStrategy", "TransactionExecutor"]

P = ParamSpec("P")
T = TypeVar("T")


class RetryStrategy(Protocol):
    def next_retry(self, failure: TransactionFailureError, failure_count: int) -> float:
        """Seconds to wait before the next attempt, or a negative number to give up."""
        ...


class RetryOnConflict:
    """Retry conflicts up to ``max_retries`` times, ``delay_s`` apart (Tephra's default
    ``retryOnConflict(20, 100)``)."""

    def __init__(self, max_retries: int = 20, delay_s: float = 0.1) -> None:
        self.max_retries = max_retries
        self.delay_s = delay_s

    def next_retry(self, failure: TransactionFailureError, failure_count: int) -> float:
        if isinstance(failure, TransactionConflictError) and failure_count <= self.max_retries:
            return self.delay_s
        return -1.0


class NoRetries:
    """Never retry."""

    def next_retry(self, failure: TransactionFailureError, failure_count: int) -> float:
        return -1.0


class TransactionExecutor:
    """Runs functions transactionally over ``awares`` (see the module docstring)."""

    def __init__(
        self,
        client: TxClient,
        awares: Sequence[TransactionAware] = (),
        *,
        retry: RetryStrategy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._awares = list(awares)
        self._retry = retry if retry is not None else RetryOnConflict()
        self._sleep = sleep

    def execute(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call ``fn(*args, **kwargs)`` in a transaction; retry per the strategy."""
        failures = 0
        while True:
            try:
                return self._attempt(fn, *args, **kwargs)
            except TransactionFailureError as exc:
                failures += 1
                delay = self._retry.next_retry(exc, failures)
                if delay < 0:
                    raise
                if delay > 0:
                    self._sleep(delay)

    def _attempt(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        ctx = TransactionContext(self._client, *self._awares)
        ctx.start()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            failure = TransactionFailureError("Transaction function failure for transaction. ")
            failure.__cause__ = exc
            ctx.abort(failure)
            raise AssertionError("unreachable: abort(cause) raises") from exc
        ctx.finish()
        return result

    def transactional(self, fn: Callable[P, T]) -> Callable[P, T]:
        """Decorator: every call of ``fn`` runs through ``execute``."""

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            return self.execute(fn, *args, **kwargs)

        return wrapper
