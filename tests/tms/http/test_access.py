"""Authentication covers every route it claims to: walked over the routes the server
actually registered, not over a list kept beside them."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.tms.http.conftest import Served
from tms.http.auth import Authorizer, Grant, Permission
from tms.http.routes import ROUTES, Scope
from tms.model import TopicId

P = Permission
TOKENS = {
    "root": "root",  # admin everywhere
    "metrics": "watcher",  # only metrics
    "ns-admin": "nsadmin",  # admin of ns1 only
    "reader": "reader",  # read on ns1:t
    "writer": "writer",  # write on ns1:t
}
GRANTS = [
    Grant("root", "*", "*", frozenset({P.READ, P.WRITE, P.ADMIN})),
    Grant("watcher", "*", "*", frozenset({P.METRICS})),
    Grant("nsadmin", "ns1", "*", frozenset({P.READ, P.WRITE, P.ADMIN, P.METRICS})),
    Grant("reader", "ns1", "t", frozenset({P.READ})),
    Grant("writer", "ns1", "t", frozenset({P.WRITE})),
]


@pytest.fixture
def secured(make_server: Any) -> Served:
    served: Served = make_server(authorizer=Authorizer(TOKENS, GRANTS))
    served.service.create_topic(TopicId("ns1", "t"))
    return served


def registered(served: Served) -> list[tuple[str, str]]:
    """(method, path pattern) of every route the application serves."""
    return [
        (route.method, route.resource.canonical)
        for route in served.app.router.routes()
        if route.resource is not None
    ]


def concrete(path: str) -> str:
    path = path.replace("{namespace}", "ns1").replace("{topic}", "t")
    if path.startswith("/ui/vendor/"):
        return path.replace("{name}", "htm.module.js")
    return path.replace("{name}", "app.js")


def call(served: Served, method: str, path: str, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return served.http.request(method, served.url + concrete(path), headers=headers, json={})


def test_the_application_registers_exactly_the_declared_routes(secured: Served) -> None:
    assert sorted(registered(secured)) == sorted((r.method, r.path) for r in ROUTES)


PUBLIC = {(r.method, r.path) for r in ROUTES if r.scope is Scope.PUBLIC}


def test_only_ping_and_the_console_files_are_public() -> None:
    assert {path for _method, path in PUBLIC} == {
        "/ping", "/ui", "/ui/", "/ui/{name}", "/ui/vendor/{name}",
    }  # fmt: skip


def test_every_route_but_the_public_ones_refuses_anonymous_callers(secured: Served) -> None:
    for method, path in registered(secured):
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}):
            response = secured.http.request(
                method,
                secured.url + concrete(path),
                headers=headers,
                json={},
                allow_redirects=False,
            )
            if (method, path) in PUBLIC:
                assert response.status_code in (200, 302), (path, response.status_code)
                continue
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"] == "unauthenticated"


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/nothing/here"), ("POST", "/ping"), ("HEAD", "/metrics")]
)
def test_requests_matching_no_route_need_a_token_too(
    secured: Served, method: str, path: str
) -> None:
    assert call(secured, method, path).status_code == 401
    assert call(secured, method, path, "root").status_code in (404, 405)


@pytest.mark.parametrize("path", ["/metrics", "/v1/transactions", "/v1/metrics/history"])
def test_metrics_need_a_metrics_or_admin_grant_on_every_namespace(
    secured: Served, path: str
) -> None:
    assert call(secured, "GET", path, "root").status_code == 200
    assert call(secured, "GET", path, "metrics").status_code == 200
    for token in ("ns-admin", "reader", "writer"):  # namespace or topic grants: not enough
        response = call(secured, "GET", path, token)
        assert response.status_code == 403, token
        assert response.json()["error"] == "forbidden"


def test_the_openapi_document_needs_any_valid_token(secured: Served) -> None:
    for token in TOKENS:
        assert call(secured, "GET", "/v1/openapi.json", token).status_code == 200


@pytest.mark.parametrize("route", [r for r in ROUTES if r.scope in (Scope.TOPIC, Scope.NAMESPACE)])
def test_each_topic_route_needs_its_own_permission(secured: Served, route: Any) -> None:
    holder = {P.READ: "reader", P.WRITE: "writer", P.ADMIN: "ns-admin"}[route.permission]
    others = [t for t in ("reader", "writer", "metrics") if t != holder]
    for token in others:
        response = call(secured, route.method, route.path, token)
        assert response.status_code == 403, (route, token, response.text)
    if route.scope is Scope.TOPIC:  # the holder gets past authorization
        assert call(secured, route.method, route.path, holder).status_code not in (401, 403)


def test_inspect_is_an_admin_operation(secured: Served) -> None:
    path = "/v1/namespaces/ns1/topics/t/inspect"
    assert secured.http.get(secured.url + path, headers=_bearer("reader")).status_code == 403
    assert secured.http.get(secured.url + path, headers=_bearer("ns-admin")).status_code == 200


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
