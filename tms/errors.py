"""The one error tree of the ``tms`` package.

::

    TmsError
     ├── TmsInvalidArgumentError      (also ValueError)      HTTP 400
     │    ├── TransactionTooOldError  a write past the transaction max lifetime
     │    └── UnsupportedOperationError  an operation the server does not know
     ├── TopicNotFoundError                                  HTTP 404
     ├── TopicAlreadyExistsError                             HTTP 409
     ├── TransactionNotInProgressError                       HTTP 409
     │       a transactional write (or rollback) under a write pointer the transaction
     │       manager does not know as in progress (or, for rollback, invalid)
     ├── TmsCodecError                (also ValueError)      bytes that do not decode
     ├── UnauthenticatedError                                HTTP 401
     ├── ForbiddenError                                      HTTP 403
     ├── RequestTooLargeError                                HTTP 413
     ├── TmsTransientError            retrying may succeed
     │    ├── StorageUnavailableError the store failed or is closed  HTTP 503
     │    ├── ServiceUnavailableError the service could not be reached (client side)
     │    └── RequestTimeoutError     dropped unprocessed: it waited past its timeout
     └── TransactionServiceError      the transaction service failed (cleanup, fetches)

``status`` on each class is the HTTP status the REST layer answers with; ``code`` is the
machine-readable error code of the JSON error body.
"""

from __future__ import annotations

__all__ = [
    "ForbiddenError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ServiceUnavailableError",
    "StorageUnavailableError",
    "TmsCodecError",
    "TmsError",
    "TmsInvalidArgumentError",
    "TmsTransientError",
    "TopicAlreadyExistsError",
    "TopicNotFoundError",
    "TransactionNotInProgressError",
    "TransactionServiceError",
    "TransactionTooOldError",
    "UnauthenticatedError",
    "UnsupportedOperationError",
]


class TmsError(Exception):
    """Root of every error raised by ``tms``."""

    status = 500
    code = "internal_error"


class TmsInvalidArgumentError(TmsError, ValueError):
    """A request that can never succeed as given."""

    status = 400
    code = "invalid_argument"


class TransactionTooOldError(TmsInvalidArgumentError):
    """A transactional write whose transaction is older than the maximum lifetime."""

    code = "transaction_too_old"


class UnsupportedOperationError(TmsInvalidArgumentError):
    """An operation code the server does not know (a client newer than the server)."""

    code = "unsupported_operation"


class TopicNotFoundError(TmsError):
    status = 404
    code = "topic_not_found"

    def __init__(self, topic: object, message: str | None = None) -> None:
        super().__init__(message or f"Topic {topic} does not exist.")
        self.topic = topic


class TopicAlreadyExistsError(TmsError):
    status = 409
    code = "topic_exists"

    def __init__(self, topic: object, message: str | None = None) -> None:
        super().__init__(message or f"Topic {topic} already exists.")
        self.topic = topic


class TransactionNotInProgressError(TmsError):
    """A write pointer the transaction manager did not issue, or whose transaction is
    no longer in progress (for rollback: committed); nothing was stored."""

    status = 409
    code = "transaction_not_in_progress"


class TmsCodecError(TmsError, ValueError):
    """Stored or wire bytes that do not decode."""

    status = 400
    code = "bad_encoding"


class UnauthenticatedError(TmsError):
    """No credentials, or credentials that are not valid."""

    status = 401
    code = "unauthenticated"


class ForbiddenError(TmsError):
    """Valid credentials without the permission asked for."""

    status = 403
    code = "forbidden"


class RequestTooLargeError(TmsError):
    status = 413
    code = "request_too_large"


class TmsTransientError(TmsError):
    """The retryable branch."""

    status = 503
    code = "unavailable"

    # Subclasses set their own codes; every class has a distinct one (clients map codes
    # back to classes).


class StorageUnavailableError(TmsTransientError):
    """The store failed, or is closed."""

    code = "storage_unavailable"


class ServiceUnavailableError(TmsTransientError):
    """The messaging service could not be reached (raised by clients)."""

    code = "service_unavailable"


class RequestTimeoutError(TmsTransientError):
    """The server dropped the request, unprocessed: it waited in the server's queues past
    the timeout the client gave it. Nothing of it was done, so sending it again is safe."""

    status = 408
    code = "request_timeout"


class TransactionServiceError(TmsError):
    """The transaction service could not be used."""

    status = 503
    code = "transaction_service_unavailable"
