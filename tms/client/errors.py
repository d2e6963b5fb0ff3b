"""The ``tms`` error an error code stands for: the one mapping both transports use (the
JSON error body of the REST API, the ``Error`` body of the binary protocol)."""

from __future__ import annotations

from tms.errors import (
    ForbiddenError,
    RequestTimeoutError,
    RequestTooLargeError,
    ServiceUnavailableError,
    StorageUnavailableError,
    TmsCodecError,
    TmsError,
    TmsInvalidArgumentError,
    TmsTransientError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
    TransactionNotInProgressError,
    TransactionServiceError,
    TransactionTooOldError,
    UnauthenticatedError,
    UnsupportedOperationError,
)

__all__ = ["ERROR_CLASSES", "error_for"]

ERROR_CLASSES: dict[str, type[TmsError]] = {
    cls.code: cls
    for cls in (
        TmsError,
        TmsInvalidArgumentError,
        TransactionTooOldError,
        UnsupportedOperationError,
        TopicNotFoundError,
        TopicAlreadyExistsError,
        TmsCodecError,
        UnauthenticatedError,
        ForbiddenError,
        RequestTooLargeError,
        TmsTransientError,
        StorageUnavailableError,
        ServiceUnavailableError,
        RequestTimeoutError,
        TransactionServiceError,
        TransactionNotInProgressError,
    )
}
"""Error code -> the class raised."""

_BY_STATUS: dict[int, type[TmsError]] = {
    404: TopicNotFoundError,
    409: TopicAlreadyExistsError,
    400: TmsInvalidArgumentError,
}


def error_for(code: str | None, message: str, status: int = 0, topic: object = None) -> TmsError:
    """The error of ``code`` (an unknown code: by the HTTP ``status``, else ``TmsError``)."""
    cls = ERROR_CLASSES.get(code or "") or _BY_STATUS.get(status, TmsError)
    if cls in (TopicNotFoundError, TopicAlreadyExistsError):
        return cls(topic, message)
    return cls(message)
