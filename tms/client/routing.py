"""``Routed``: how ``MessagingClient`` sends one REST request — to which instance, and
what it does with a failure (a part of ``MessagingClient``; see there).

* The request goes to the topic's last known owner, else the current instance
  (``tms.client.instances``).
* No answer: the instance is left for the next one when the call may be sent again —
  it is idempotent, or the connection was never made (an unanswered write may have been
  stored: it is never sent twice).
* ``307 not_owner`` (another instance owns the topic) or ``503 fenced`` (its owner was
  just deposed): nothing was done; the same request goes to the owner named in
  ``Location`` (remembered), or again after a pause while the owner changes.
* Any other retryable error (``TmsTransientError``): an idempotent call is retried
  after a back-off pause; anything else is raised (``error_from_response``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice

from tms.client.instances import Instances, owner_url
from tms.client.transport import Reply, TransportError
from tms.errors import (
    FencedError,
    NotOwnerError,
    ServiceUnavailableError,
    TmsError,
    TmsTransientError,
    error_for,
)
from txms_common.retry import backoff

__all__ = ["Routed", "error_from_response"]


def error_from_response(response: Reply, topic: object = None) -> TmsError:
    """The ``tms`` error a non-200 response stands for (``tms.errors.error_for``)."""
    try:
        body = response.json()
        code, message = body["error"], body["message"]
    except (ValueError, KeyError, TypeError):
        code, message = None, response.text or response.reason
    return error_for(code, message, status=response.status, topic=topic)


class Routed:
    """The sending half of ``MessagingClient`` (its fields are set there)."""

    urls: list[str]
    instances: Instances
    _headers: dict[str, str]
    _timeout: float
    _retries: int
    _backoff: float
    _sleep: Callable[[float], None]

    def _request(
        self,
        method: str,
        url: str,
        *,
        topic: object = None,
        idempotent: bool = True,
        timeout_s: float | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Reply:
        # Pauses before each retry; none for a call that must not be sent twice.
        delays = islice(backoff(self._backoff, 4.0), self._retries if idempotent else 0)
        timeout = timeout_s if timeout_s is not None else self._timeout
        headers = {**self._headers, "Content-Type": content_type} if content_type else self._headers
        hops = 0  # redirects, refusals by a deposed owner, instances tried: each bounded
        while True:
            target = self.instances.target(topic)
            try:
                response = self.instances.transport(target).request(
                    method, url, body=body, headers=headers, params=params, timeout_s=timeout
                )
            except TransportError as exc:
                error: TmsError = ServiceUnavailableError(str(exc))
                error.__cause__ = exc
                self.instances.failed(target, topic)
                # another instance, unless an unanswered write may have been stored
                if (
                    len(self.urls) > 1
                    and (idempotent or not exc.sent)
                    and hops < 2 * len(self.urls)
                ):
                    hops += 1
                    continue
            else:
                if response.status == 200:
                    return response
                error = error_from_response(response, topic)
                if isinstance(error, (NotOwnerError, FencedError)) and hops < 8:
                    # Not executed: send it again, to the owner named (or to find it).
                    owner = owner_url(response.headers.get("Location", ""), url)
                    self.instances.owner(topic, owner)
                    hops += 1
                    if not owner:  # the owner is changing: ask again in a moment
                        self._sleep(min(0.05 * hops, 1.0))
                    continue
                if not isinstance(error, TmsTransientError):
                    raise error
            delay = next(delays, None)
            if delay is None:
                raise error
            self._sleep(delay)
