"""Every route of the REST service and the access it needs: the one place routes are
declared.

``create_app`` registers exactly ``ROUTES`` and nothing else, and its access middleware
looks every request's route up here before the handler runs, so a route cannot be added
without saying who may call it. With an authorizer:

* ``PUBLIC`` — anyone (``GET /ping``, for load balancers and liveness probes, and the
  console's static files under ``/ui``, which hold no data);
* ``AUTHENTICATED`` — any valid bearer token (the OpenAPI document);
* ``NAMESPACE`` / ``TOPIC`` — a grant of the route's permission on the namespace (topic
  ``"*"``) or on the topic;
* ``SERVICE`` — a grant of the permission (or ``admin``) on every namespace and topic
  (metrics, which list every topic).

A request that matches no route (404, 405) needs a valid token too, so an anonymous
caller learns nothing about the API but that ``/ping`` and the console's files answer.
Names in the path are validated (400) after authentication (401) and before
authorization (403).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aiohttp import web

from tms.http.auth import Authorizer, Permission
from tms.model import TopicId, validate_namespace

__all__ = [
    "NAMESPACE_PATH",
    "ROUTES",
    "SUBSCRIPTIONS_PATH",
    "SUBSCRIPTION_PATH",
    "TOPIC_PATH",
    "Route",
    "Scope",
    "authorize",
]


class Scope(enum.Enum):
    PUBLIC = "public"
    AUTHENTICATED = "authenticated"
    NAMESPACE = "namespace"
    TOPIC = "topic"
    SERVICE = "service"


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: str
    """The name of the ``tms.http.app.Api`` method that answers it."""
    scope: Scope
    permission: Permission | None = None

    def __post_init__(self) -> None:
        needs_permission = self.scope in (Scope.NAMESPACE, Scope.TOPIC, Scope.SERVICE)
        if needs_permission != (self.permission is not None):
            raise ValueError(f"{self.method} {self.path}: scope and permission disagree")

    @property
    def requirement(self) -> str:
        """What a caller needs, in words (the OpenAPI document shows it)."""
        if self.scope is Scope.PUBLIC:
            return "none"
        if self.permission is None:
            return "a valid bearer token"
        where = {
            Scope.NAMESPACE: "the namespace",
            Scope.TOPIC: "the topic",
            Scope.SERVICE: "every namespace and topic ('admin' there also does)",
        }[self.scope]
        return f"'{self.permission.value}' on {where}"


NAMESPACE_PATH = "/v1/namespaces/{namespace}"
TOPIC_PATH = NAMESPACE_PATH + "/topics/{topic}"
SUBSCRIPTIONS_PATH = TOPIC_PATH + "/subscriptions"
SUBSCRIPTION_PATH = SUBSCRIPTIONS_PATH + "/{name}"
_P = Permission

ROUTES: tuple[Route, ...] = (
    Route("PUT", TOPIC_PATH, "create_topic", Scope.TOPIC, _P.ADMIN),
    Route("GET", TOPIC_PATH, "get_topic", Scope.TOPIC, _P.READ),
    Route("DELETE", TOPIC_PATH, "delete_topic", Scope.TOPIC, _P.ADMIN),
    Route("PUT", TOPIC_PATH + "/properties", "update_topic", Scope.TOPIC, _P.ADMIN),
    Route("GET", NAMESPACE_PATH + "/topics", "list_topics", Scope.NAMESPACE, _P.READ),
    Route("POST", TOPIC_PATH + "/publish", "publish", Scope.TOPIC, _P.WRITE),
    Route("POST", TOPIC_PATH + "/store", "store", Scope.TOPIC, _P.WRITE),
    Route("POST", TOPIC_PATH + "/rollback", "rollback", Scope.TOPIC, _P.WRITE),
    Route("POST", TOPIC_PATH + "/markers", "markers", Scope.TOPIC, _P.WRITE),
    Route("POST", TOPIC_PATH + "/poll", "poll", Scope.TOPIC, _P.READ),
    Route("POST", TOPIC_PATH + "/bounds", "bounds", Scope.TOPIC, _P.READ),
    # Queues (topics with kind=queue): producers enqueue; consumers receive, ack and nack
    # with the grant a topic's readers have. Settling needs write: it makes a
    # transaction's pending enqueues deliverable, or drops them.
    Route("POST", TOPIC_PATH + "/enqueue", "enqueue", Scope.TOPIC, _P.WRITE),
    Route("POST", TOPIC_PATH + "/receive", "receive", Scope.TOPIC, _P.READ),
    Route("POST", TOPIC_PATH + "/ack", "ack", Scope.TOPIC, _P.READ),
    Route("POST", TOPIC_PATH + "/nack", "nack", Scope.TOPIC, _P.READ),
    Route("POST", TOPIC_PATH + "/settle", "settle", Scope.TOPIC, _P.WRITE),
    Route("GET", TOPIC_PATH + "/queue", "queue_stats", Scope.TOPIC, _P.READ),
    Route("GET", TOPIC_PATH + "/stats", "topic_stats", Scope.TOPIC, _P.READ),
    Route("GET", NAMESPACE_PATH + "/stats", "namespace_stats", Scope.NAMESPACE, _P.READ),
    # The newest messages with their status (the table debugger): what a
    # non-transactional poll of the topic returns, plus each entry's write pointer and
    # status, so a reader of the topic may see it.
    Route("GET", TOPIC_PATH + "/messages", "recent_messages", Scope.TOPIC, _P.READ),
    # Raw rows of every generation, staged payloads of running transactions: more than a
    # reader of the topic may see, so an operator's tool.
    Route("GET", TOPIC_PATH + "/inspect", "inspect", Scope.TOPIC, _P.ADMIN),
    # Subscriptions are the state of the topic's readers: reading the topic is what
    # they need, for all of it.
    Route("GET", SUBSCRIPTIONS_PATH, "list_subscriptions", Scope.TOPIC, _P.READ),
    Route("PUT", SUBSCRIPTION_PATH, "create_subscription", Scope.TOPIC, _P.READ),
    Route("GET", SUBSCRIPTION_PATH, "get_subscription", Scope.TOPIC, _P.READ),
    Route("DELETE", SUBSCRIPTION_PATH, "delete_subscription", Scope.TOPIC, _P.READ),
    Route("PUT", SUBSCRIPTION_PATH + "/preferences", "update_subscription", Scope.TOPIC, _P.READ),
    Route("POST", SUBSCRIPTION_PATH + "/poll", "poll_subscription", Scope.TOPIC, _P.READ),
    Route("POST", SUBSCRIPTION_PATH + "/commit", "commit_subscription", Scope.TOPIC, _P.READ),
    Route("POST", SUBSCRIPTION_PATH + "/seek", "seek_subscription", Scope.TOPIC, _P.READ),
    Route("POST", SUBSCRIPTION_PATH + "/rollback", "rollback_subscription", Scope.TOPIC, _P.READ),
    # A publisher's word that its transactions finished (wakes readers held behind them).
    Route("POST", TOPIC_PATH + "/finished", "transactions_finished", Scope.TOPIC, _P.WRITE),
    Route("GET", "/ping", "ping", Scope.PUBLIC),
    Route("GET", "/metrics", "metrics", Scope.SERVICE, _P.METRICS),
    Route("GET", "/v1/openapi.json", "openapi", Scope.AUTHENTICATED),
    Route("GET", "/v1/cluster", "cluster", Scope.AUTHENTICATED),
    # The transaction manager's state and the metrics over time span the whole service.
    Route("GET", "/v1/transactions", "transactions", Scope.SERVICE, _P.METRICS),
    Route("GET", "/v1/metrics/history", "metrics_history", Scope.SERVICE, _P.METRICS),
    Route("GET", "/v1/console", "console_info", Scope.AUTHENTICATED),
    # The console's files hold no data (the page asks the API with the user's token).
    Route("GET", "/ui", "console_redirect", Scope.PUBLIC),
    Route("GET", "/ui/", "console_index", Scope.PUBLIC),
    Route("GET", "/ui/{name}", "console_file", Scope.PUBLIC),
    Route("GET", "/ui/vendor/{name}", "console_vendor", Scope.PUBLIC),
)


def authorize(authorizer: Authorizer, route: Route | None, request: web.Request) -> None:
    """Raise unless the request may use ``route`` (None: it matched no route)."""
    if route is not None and route.scope is Scope.PUBLIC:
        return
    principal = authorizer.authenticate(request.headers.get("Authorization"))
    if route is None or route.permission is None:
        return
    if route.scope is Scope.SERVICE:
        authorizer.check_service(principal, route.permission)
    elif route.scope is Scope.NAMESPACE:
        namespace = validate_namespace(request.match_info["namespace"])
        authorizer.check(principal, namespace, None, route.permission)
    else:
        topic = TopicId(request.match_info["namespace"], request.match_info["topic"])
        authorizer.check(principal, topic.namespace, topic.topic, route.permission)
