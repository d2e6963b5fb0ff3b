"""The console's files and ``GET /v1/console`` on a real service."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tms.http.conftest import Served
from tms.http.auth import Authorizer, Grant, Permission
from tms.model import TopicId

P = Permission


@pytest.fixture
def secured(make_server: Any) -> Served:
    grants = [
        Grant("ops", "*", "*", frozenset({P.ADMIN})),
        Grant("viewer", "ns1", "*", frozenset({P.READ})),
    ]
    served: Served = make_server(authorizer=Authorizer({"a": "ops", "v": "viewer"}, grants))
    for topic in (TopicId("ns1", "t"), TopicId("ns2", "u")):
        served.service.create_topic(topic)
    return served


def test_the_page_and_its_modules_are_served_with_a_policy(served: Served) -> None:
    redirect = served.http.get(f"{served.url}/ui", allow_redirects=False)
    assert (redirect.status_code, redirect.headers["Location"]) == (302, "/ui/")
    page = served.http.get(f"{served.url}/ui/")
    assert page.headers["Content-Type"].startswith("text/html")
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "'sha256-" in policy and "unsafe" not in policy
    for name in (
        "app.js",
        "panel.js",
        "style.css",
        "vendor/preact.module.js",
        "vendor/uPlot.esm.js",
    ):
        response = served.http.get(f"{served.url}/ui/{name}")
        assert response.status_code == 200, name
        assert response.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    ["/ui/nope.js", "/ui/..%2Fhttp%2Fapp.py", "/ui/vendor/LICENSE.preact", "/ui/vendor/README.md",
     "/ui/.hidden.js", "/ui/vendor/..%2F..%2Fcli%2F__init__.py"],
)  # fmt: skip
def test_nothing_else_is_served(served: Served, path: str) -> None:
    response = served.http.get(served.url + path)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_console_info_tells_who_and_what(secured: Served) -> None:
    def info(token: str) -> Any:
        return secured.http.get(
            f"{secured.url}/v1/console", headers={"Authorization": f"Bearer {token}"}
        ).json()

    ops, viewer = info("a"), info("v")
    assert (ops["principal"], ops["namespaces"], ops["metrics"]) == ("ops", ["ns1", "ns2"], True)
    assert (viewer["principal"], viewer["namespaces"], viewer["metrics"]) == (
        "viewer",
        ["ns1"],
        False,
    )
    assert viewer["grants"] == [{"namespace": "ns1", "topic": "*", "permissions": ["read"]}]
    assert viewer["features"] == {
        "stats": True,
        "metricsHistory": True,
        "transactions": False,
        "subscriptions": True,
        "cluster": False,
        "queues": True,
    }
    assert secured.http.get(f"{secured.url}/v1/console").status_code == 401


def test_an_open_service_says_so(served: Served) -> None:
    body = served.http.get(f"{served.url}/v1/console").json()
    assert (body["authentication"], body["principal"], body["metrics"]) == (False, None, True)
