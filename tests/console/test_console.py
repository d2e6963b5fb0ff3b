"""The console in a real browser: headless Chromium (Debian's package) driven by
Selenium against the standalone stack on free ports. The numbers a page shows are
checked against the API, the sign-in, the read-only view, the payload toggle and
publishing a test message are exercised, and every page is saved as a screenshot under
the test's tmp dir. Skipped only where Chromium or its driver is not installed."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.console.browser import (
    EVENTS,
    ORDERS,
    Seeded,
    chrome,
    missing,
    seeded_stack,
    sign_in,
    wait_for,
)

reason = missing()
pytestmark = pytest.mark.skipif(reason is not None, reason=reason or "")

if reason is None:
    from selenium.webdriver.common.by import By


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    with seeded_stack(tmp_path_factory.mktemp("stack") / "data") as s:
        yield s


@pytest.fixture
def browser() -> Iterator[Any]:
    with chrome() as driver:
        yield driver
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        # A refused call shows in the page (checked by the tests) and in the console log.
        unexpected = [
            e for e in severe if " 403 " not in e["message"] and " 401 " not in e["message"]
        ]
        assert not unexpected, unexpected


def api(seeded: Seeded, path: str, token: str = "admin-token") -> Any:
    response = requests.get(
        seeded.stack.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    response.raise_for_status()
    return response.json()


def text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def shot(driver: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000  # a page, not a blank


def test_sign_in_keeps_the_token_out_of_urls(seeded: Seeded, browser: Any, tmp_path: Path) -> None:
    # Given the console of a service with authentication
    browser.get(f"{seeded.stack.url}/ui")
    wait_for(lambda: browser.find_element(By.ID, "token"), what="the sign-in form")
    shot(browser, tmp_path, "sign-in")
    # When a wrong token is tried, then it is refused in the page
    browser.find_element(By.ID, "token").send_keys("wrong")
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_for(lambda: "not accepted" in text(browser, "[role=alert]"), what="the refusal")
    # When the right one is given, then the console opens as that principal
    sign_in(browser, seeded.stack.url, "admin-token")
    assert wait_for(lambda: text(browser, "[data-field=principal]")) == "ops"
    assert "token" not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('txms.console.token')") == (
        "admin-token"
    )
    assert browser.execute_script("return localStorage.length") == 0
    # And signing out forgets it
    browser.find_element(By.CSS_SELECTOR, "button.link").click()
    wait_for(lambda: browser.find_element(By.ID, "token"), what="the sign-in form again")
    assert browser.execute_script("return sessionStorage.getItem('txms.console.token')") is None


def test_overview_shows_what_the_api_says(seeded: Seeded, browser: Any, tmp_path: Path) -> None:
    before = api(seeded, "/v1/transactions")["readPointer"]
    sign_in(browser, seeded.stack.url, "admin-token")
    stats = {s["topic"]: s for s in api(seeded, "/v1/namespaces/default/stats")}
    for name in ("events", "orders"):
        row = f"[data-table=topics] tr[data-topic={name}]"
        wait_for(lambda row=row: browser.find_elements(By.CSS_SELECTOR, row), what=row)
        assert text(browser, f"{row} [data-field=messages]") == f"{stats[name]['messages']:,}"
    assert text(browser, "[data-table=topics] tr[data-topic=orders] [data-field=payloadBytes]") == (
        f"{stats['orders']['payloadBytes']} B"
    )
    assert text(browser, "[data-field=topicCount]") == str(len(stats))  # a queue too
    total = sum(s["messages"] for s in stats.values())
    assert text(browser, "[data-field=totalMessages]") == f"{total:,}"
    # The transaction manager as the API reports it (nothing changes it meanwhile)
    tx = api(seeded, "/v1/transactions")
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#panel-transactions [data-field=invalid]")
    )
    assert text(browser, "#panel-transactions [data-field=invalid]") == str(tx["invalid"]) == "1"
    assert text(browser, "#panel-transactions [data-field=inProgress]") == str(tx["inProgress"])
    # (each look at the manager starts and aborts a transaction: the pointer moves on)
    shown = int(text(browser, "#panel-transactions [data-field=readPointer]"))
    assert before <= shown <= api(seeded, "/v1/transactions")["readPointer"]
    # And the charts draw from the sampled metrics
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "[data-chart=throughput] canvas"),
        30,
        "chart",
    )
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "[data-chart=latency] canvas"), 30, "chart"
    )
    shot(browser, tmp_path, "overview")


def test_topic_page_is_the_table_debugger(seeded: Seeded, browser: Any, tmp_path: Path) -> None:
    sign_in(browser, seeded.stack.url, "admin-token")
    browser.get(f"{seeded.stack.url}/ui/#/topic/default/events")
    rows = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "[data-table=messages] tbody tr"),
        what="rows",
    )
    listed = api(seeded, "/v1/namespaces/default/topics/events/messages?limit=50")["messages"]
    assert [r.get_attribute("data-id") for r in rows] == [m["id"] for m in listed]
    shown = {
        r.find_element(By.CSS_SELECTOR, "[data-field=payload]").text: r.get_attribute("data-status")
        for r in rows
    }
    for payload, status in seeded.statuses.items():
        assert shown[payload] == status, payload
    assert shown["\\x00\\x01\\xfe\\xff binary"] == "plain"  # escaped, never raw
    stats = api(seeded, "/v1/namespaces/default/topics/events/stats")
    assert text(browser, "#panel-topic-stats [data-field=messages]") == str(stats["messages"])
    shot(browser, tmp_path, "topic")


def test_a_queue_shows_its_messages_per_state(seeded: Seeded, browser: Any, tmp_path: Path) -> None:
    sign_in(browser, seeded.stack.url, "admin-token")
    browser.get(f"{seeded.stack.url}/ui/#/topic/default/jobs")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#panel-queue [data-field=ready]"))
    stats = api(seeded, "/v1/namespaces/default/topics/jobs/queue")
    assert (stats["ready"], stats["leased"], stats["scheduled"]) == (2, 1, 1)
    for field in ("ready", "leased", "scheduled", "dead", "pending", "acked"):
        assert text(browser, f"#panel-queue [data-field={field}]") == str(stats[field]), field
    shot(browser, tmp_path, "queue")
    # a topic that is not a queue has no queue panel
    browser.get(f"{seeded.stack.url}/ui/#/topic/default/orders")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-table=messages] tbody tr"))
    assert not browser.find_elements(By.CSS_SELECTOR, "#panel-queue")


def test_payload_toggle(seeded: Seeded, browser: Any) -> None:
    sign_in(browser, seeded.stack.url, "admin-token")
    browser.get(f"{seeded.stack.url}/ui/#/topic/default/events")
    placed = "[data-table=messages] tbody tr[data-status=plain]:last-child [data-field=payload]"
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, placed), what="the first message")
    assert text(browser, placed) == '{"order": 17, "state": "placed"}'
    browser.find_element(By.CSS_SELECTOR, "button[data-mode=hex]").click()
    expected_hex = " ".join(f"{b:02x}" for b in b'{"order": 17, "state": "placed"}')
    wait_for(lambda: text(browser, placed) == expected_hex, what="hex")
    browser.find_element(By.CSS_SELECTOR, "button[data-mode=json]").click()
    wait_for(
        lambda: json.loads(text(browser, placed)) == {"order": 17, "state": "placed"}, what="json"
    )
    assert "\n" in text(browser, placed)  # pretty-printed
    binary = "[data-table=messages] tbody tr:nth-last-child(2) [data-field=payload]"
    assert text(browser, binary) == "(not JSON)"


def test_publishing_a_test_message(seeded: Seeded, browser: Any, tmp_path: Path) -> None:
    sign_in(browser, seeded.stack.url, "admin-token")
    browser.get(f"{seeded.stack.url}/ui/#/topic/default/orders")
    area = wait_for(lambda: browser.find_element(By.ID, "test-message"), what="the form")
    area.send_keys('{"test": "from the console"}')
    shot(browser, tmp_path, "publish")
    browser.find_element(By.CSS_SELECTOR, "form.publish button[type=submit]").click()
    wait_for(
        lambda: "Published 1 message" in text(browser, "form.publish [role=status]"), what="said"
    )
    newest = api(seeded, "/v1/namespaces/default/topics/orders/messages?limit=1")["messages"][0]
    assert base64.b64decode(newest["payload"]) == b'{"test": "from the console"}'
    first = "[data-table=messages] tbody tr:first-child"
    wait_for(
        lambda: (
            browser.find_element(By.CSS_SELECTOR, first).get_attribute("data-id") == newest["id"]
        )
    )


def test_subscriptions_panel_shows_lag_and_seeks(
    seeded: Seeded, browser: Any, tmp_path: Path
) -> None:
    # Given two subscriptions of the orders topic: one at the start, one at the end
    base = f"{seeded.stack.url}/v1/namespaces/default/topics/orders/subscriptions"
    admin = {"Authorization": "Bearer admin-token"}
    for name, start in (("mailer", "earliest"), ("audit", "latest")):
        answer = requests.put(f"{base}/{name}", json={"start": start}, headers=admin, timeout=30)
        assert answer.status_code == 200, answer.text
    # When the topic's page is open
    sign_in(browser, seeded.stack.url, "admin-token")
    browser.get(f"{seeded.stack.url}/ui/#/topic/default/orders")
    rows = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "[data-table=subscriptions] tbody tr"),
        what="subscriptions",
    )
    # Then it shows each one's lag and position as the API says
    listed = {
        s["name"]: s for s in api(seeded, "/v1/namespaces/default/topics/orders/subscriptions")
    }
    shown = {r.get_attribute("data-name"): r for r in rows}
    assert set(shown) == set(listed) == {"audit", "mailer"}
    for name, s in listed.items():
        row = shown[name]
        assert (
            row.find_element(By.CSS_SELECTOR, "[data-field=lag]").text
            == f"{s['lag']['messages']:,}"
        )
        assert row.find_element(By.CSS_SELECTOR, "[data-field=position]").text == s["position"]
    assert listed["mailer"]["lag"]["messages"] > 0 and listed["audit"]["lag"]["messages"] == 0
    shot(browser, tmp_path, "subscriptions")
    # When the mailer is moved to the end from the page
    form = "form[data-seek=mailer]"
    browser.find_element(By.CSS_SELECTOR, f"{form} select option[value=latest]").click()
    browser.find_element(By.CSS_SELECTOR, f"{form} button[type=submit]").click()
    # Then the API has it there, one version on, and the page shows it
    wait_for(
        lambda: (
            api(seeded, "/v1/namespaces/default/topics/orders/subscriptions/mailer")["lag"][
                "messages"
            ]
            == 0
        ),
        what="the seek",
    )
    assert api(seeded, "/v1/namespaces/default/topics/orders/subscriptions/mailer")["version"] == (
        listed["mailer"]["version"] + 1
    )
    lag = "[data-table=subscriptions] tbody tr[data-name=mailer] [data-field=lag]"
    wait_for(lambda: text(browser, lag) == "0", what="the new lag")


def test_a_reader_sees_no_write_action_and_no_metrics(
    seeded: Seeded, browser: Any, tmp_path: Path
) -> None:
    sign_in(browser, seeded.stack.url, "reader-token")
    assert wait_for(lambda: text(browser, "[data-field=principal]")) == "viewer"
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-table=topics]"), what="topics")
    # Panels that need the metrics grant are not shown, nor the Metrics page's link
    assert not browser.find_elements(By.ID, "panel-transactions")
    assert not browser.find_elements(By.ID, "panel-throughput")
    assert not browser.find_elements(By.CSS_SELECTOR, "a[href='#/metrics']")
    shot(browser, tmp_path, "reader-overview")
    # The topic page has no publish form
    browser.get(f"{seeded.stack.url}/ui/#/topic/default/events")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-table=messages] tbody tr"))
    assert not browser.find_elements(By.ID, "test-message")
    # And the API refuses what the page does not offer, through the browser too
    browser.get(f"{seeded.stack.url}/ui/#/metrics")
    alert = wait_for(lambda: text(browser, "#panel-metrics [role=alert]"), what="the refusal")
    assert "may not" in alert
    status = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch('/v1/namespaces/default/topics/events/publish', {
          method: 'POST',
          headers: {'Content-Type': 'application/json',
                    Authorization: 'Bearer ' + sessionStorage.getItem('txms.console.token')},
          body: JSON.stringify({messages: ['aGk=']}),
        }).then(r => done(r.status));
        """
    )
    assert status == 403
    assert api(seeded, "/v1/namespaces/default/topics/events/stats")["messages"] == len(
        api(seeded, "/v1/namespaces/default/topics/events/messages?limit=100")["messages"]
    )


def test_metrics_page_lists_every_sample(seeded: Seeded, browser: Any, tmp_path: Path) -> None:
    sign_in(browser, seeded.stack.url, "admin-token")
    browser.get(f"{seeded.stack.url}/ui/#/metrics")
    rows = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-table=metrics] tbody tr"))
    names = {r.find_element(By.CSS_SELECTOR, "td").text for r in rows}
    assert {"tms_published_messages_total", "tms_topic_bytes", "tms_http_requests_total"} <= names
    search = browser.find_element(By.CSS_SELECTOR, "input[type=search]")
    search.send_keys("topic=orders")
    wait_for(
        lambda: all(
            "orders" in r.text
            for r in browser.find_elements(By.CSS_SELECTOR, "[data-table=metrics] tbody tr")
        )
    )
    shot(browser, tmp_path, "metrics")


def test_the_open_service_needs_no_sign_in(tmp_path: Path) -> None:
    with seeded_stack(tmp_path / "data", auth=False) as s, chrome() as driver:
        driver.get(f"{s.stack.url}/ui/")
        wait_for(
            lambda: driver.find_elements(By.CSS_SELECTOR, "[data-table=topics]"), what="topics"
        )
        assert "no authentication" in text(driver, "header.top .who")
        assert driver.find_elements(By.ID, "panel-transactions")
        assert not driver.find_elements(By.ID, "panel-instances")  # no cluster here
        assert ORDERS.topic in text(driver, "[data-table=topics]") and EVENTS.topic in text(
            driver, "[data-table=topics]"
        )
