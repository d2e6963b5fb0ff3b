"""The one error tree of the ``tms`` package.

::

    TmsError
     ├── TmsInvalidArgumentError      (also ValueError)      HTTP 400
     │    ├── TransactionTooOldError  a write past the transaction max lifetime
     │    ├── UnsupportedOperationError  an operation the server does not know
     │    └── PositionOutOfRangeError a subscription position moved backwards
     │                                without a seek, or past what it could have read
     ├── TopicNotFoundError                                  HTTP 404
     ├── SubscriptionNotFoundError                           HTTP 404
     ├── TopicAlreadyExistsError                             HTTP 409
     ├── SubscriptionExistsError                             HTTP 409
     ├── BadVersionError                                     HTTP 409
     │       a subscription update with a version that is not the current one
     ├── TransactionNotInProgressError                       HTTP 409
     │       a transactional write (or rollback) under a write pointer the transaction
     │       manager does not know as in progress (or, for rollback, invalid)
     ├── TmsCodecError                (also ValueError)      bytes that do not decode
     ├── UnauthenticatedError                                HTTP 401
     ├── ForbiddenError                                      HTTP 403
     ├── RequestTooLargeError                                HTTP 413
     ├── TmsTransientError            retrying may succeed
     │    ├── StorageUnavailableError the store failed or is closed  HTTP 503
     │    │    └── FencedError        a write under a fence that was taken by another
     │    │                           (a deposed topic owner): nothing was written
     │    ├── ServiceUnavailableError the service could not be reached (client side)
     │    ├── ClusterUnavailableError ZooKeeper could not be used (cluster mode)
     │    ├── NotOwnerError           another instance owns the topic    HTTP 307
     │    │                           (``Location``: the owner's URL for the same path)
     │    └── RequestTimeoutError     dropped unprocessed: it waited past its timeout
     └── TransactionServiceError      the transaction service failed (cleanup, fetches)

``status`` on each class is the HTTP status the REST layer answers with; ``code`` is the
machine-readable error code of the JSON error body. Every class registers its code in
``ERROR_CODES`` when it is defined (a second class with a code already taken is a
``TypeError``), and ``error_for`` turns a code back into its class: the two directions of
the wire mapping, kept beside the classes.
"""

from __future__ import annotations

__all__ = [
    "ERROR_CODES",
    "BadVersionError",
    "ClusterUnavailableError",
    "FencedError",
    "ForbiddenError",
    "NotOwnerError",
    "PositionOutOfRangeError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ServiceUnavailableError",
    "StorageUnavailableError",
    "SubscriptionExistsError",
    "SubscriptionNotFoundError",
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
    "error_for",
    "write_interrupted",
]

ERROR_CODES: dict[str, type[TmsError]] = {}
"""Error code -> the class with that code: every class of the tree (see the docstring)."""


class TmsError(Exception):
    """Root of every error raised by ``tms``."""

    status = 500
    code = "internal_error"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)


def _register(cls: type[TmsError]) -> None:
    taken = ERROR_CODES.setdefault(cls.code, cls)
    if taken is not cls:
        raise TypeError(f"{cls.__name__}: error code {cls.code!r} is {taken.__name__}'s")


_register(TmsError)


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


class PositionOutOfRangeError(TmsInvalidArgumentError):
    """A subscription position that would move backwards (only a seek may), or past what
    the subscription could have read; nothing was changed."""

    code = "position_out_of_range"


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


class SubscriptionNotFoundError(TmsError):
    status = 404
    code = "subscription_not_found"

    def __init__(self, subscription: object, message: str | None = None) -> None:
        super().__init__(message or f"Subscription {subscription} does not exist.")
        self.subscription = subscription


class SubscriptionExistsError(TmsError):
    status = 409
    code = "subscription_exists"

    def __init__(self, subscription: object, message: str | None = None) -> None:
        super().__init__(message or f"Subscription {subscription} already exists.")
        self.subscription = subscription


class BadVersionError(TmsError):
    """A subscription update carrying a version other than the record's current one
    (Hedwig's ``BadVersionException``): someone changed it since it was read. Nothing
    was changed; read it again. ``expected`` is the version sent, ``actual`` the
    current one (None when not known)."""

    status = 409
    code = "bad_version"

    def __init__(
        self, message: str, *, expected: int | None = None, actual: int | None = None
    ) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


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


class StorageUnavailableError(TmsTransientError):
    """The store failed, or is closed."""

    code = "storage_unavailable"


class FencedError(StorageUnavailableError):
    """A write carried a fence (``tms.store.kv``) that is no longer the newest: another
    owner took the topic since. Nothing of the write was applied; retrying through the
    current owner may succeed."""

    code = "fenced"


class ServiceUnavailableError(TmsTransientError):
    """The messaging service could not be reached (raised by clients)."""

    code = "service_unavailable"


class ClusterUnavailableError(TmsTransientError):
    """ZooKeeper (topic ownership, membership) could not be used."""

    code = "cluster_unavailable"


class NotOwnerError(TmsTransientError):
    """A write (or topic change) reached an instance that does not own the topic: the
    owner at ``owner_url`` takes it (the REST layer answers 307 with that ``Location``);
    ``owner_rpc`` is the owner's binary protocol address (``tms://host:port``; "" when
    it serves none or is not known), which a binary error answer carries."""

    status = 307
    code = "not_owner"

    def __init__(self, message: str, owner_url: str = "", owner_rpc: str = "") -> None:
        super().__init__(message)
        self.owner_url = owner_url
        self.owner_rpc = owner_rpc


class RequestTimeoutError(TmsTransientError):
    """The server dropped the request, unprocessed: it waited in the server's queues past
    the timeout the client gave it. Nothing of it was done, so sending it again is safe."""

    status = 408
    code = "request_timeout"


class TransactionServiceError(TmsError):
    """The transaction service could not be used."""

    status = 503
    code = "transaction_service_unavailable"


_BY_STATUS: dict[int, type[TmsError]] = {
    400: TmsInvalidArgumentError,
    404: TopicNotFoundError,
    409: TopicAlreadyExistsError,
}


def error_for(code: str | None, message: str, *, status: int, topic: object = None) -> TmsError:
    """The error an answer with ``code`` (None: the body had none) and HTTP ``status``
    stands for: the class registered under the code, else one by the status alone;
    ``topic`` for the errors that name one."""
    cls = ERROR_CODES.get(code or "") or _BY_STATUS.get(status, TmsError)
    if issubclass(cls, (TopicNotFoundError, TopicAlreadyExistsError)):
        return cls(topic, message)
    if issubclass(cls, (SubscriptionNotFoundError, SubscriptionExistsError)):
        return cls(None, message)
    return cls(message)


def write_interrupted(cause: BaseException) -> StorageUnavailableError:
    """The error of a write whose batch failed on its way for a reason of another
    caller's (``cause``): nothing says whether it was stored."""
    return StorageUnavailableError(f"the write was interrupted: {cause!r}")
