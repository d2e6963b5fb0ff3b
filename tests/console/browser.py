"""Headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by Selenium,
and a standalone stack seeded with topics and transactions in every state, for the
console's browser tests and for the screenshots in docs/console.md."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tms.client import MessagingClient
from tms.model import TopicId
from tms.queues import EnqueueItem
from tms.standalone import Launched
from txn.rpc.client import ThriftTxClient

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
AUTH_FILE = """\
[[tokens]]
token = "admin-token"
principal = "ops"

[[tokens]]
token = "reader-token"
principal = "viewer"

[[grants]]
principal = "ops"
namespace = "*"
topic = "*"
permissions = ["read", "write", "admin", "metrics"]

[[grants]]
principal = "viewer"
namespace = "default"
topic = "*"
permissions = ["read"]
"""
EVENTS = TopicId("default", "events")
ORDERS = TopicId("default", "orders")
JOBS = TopicId("default", "jobs")


def missing() -> str | None:
    """Why a browser cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            return f"{path} is not installed (Debian: chromium chromium-driver)"
    return None


@contextlib.contextmanager
def chrome(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium with a fresh profile; quit at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="txms-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Seeded:
    """The stack, its clients, and the ids of what was seeded."""

    stack: Launched
    client: MessagingClient
    tx: ThriftTxClient
    statuses: dict[str, str]
    """payload text -> the status the table debugger must show."""


@contextlib.contextmanager
def seeded_stack(data_dir: Path, *, auth: bool = True) -> Iterator[Seeded]:
    """The standalone stack on free ports (with the auth file above when ``auth``), a
    topic with a message of every status, and a busier one."""
    extra: tuple[str, ...] = ()
    if auth:
        auth_file = data_dir.parent / "auth.toml"
        auth_file.write_text(AUTH_FILE)
        extra = ("--auth", str(auth_file), "--config", str(_config(data_dir.parent)))
    else:
        extra = ("--config", str(_config(data_dir.parent)))
    with Launched(data_dir, *extra) as stack:
        client = MessagingClient(stack.url, token="admin-token" if auth else None)
        tx = ThriftTxClient(stack.tx_address)
        try:
            yield Seeded(stack, client, tx, _seed(client, tx))
        finally:
            tx.close()
            client.close()


def _config(where: Path) -> Path:
    path = where / "stack.toml"
    # Samples every half second, so the charts have points within a test.
    path.write_text("[http]\nhistory_interval_s = 0.5\n")
    return path


def _seed(client: MessagingClient, tx: ThriftTxClient) -> dict[str, str]:
    client.create_topic(EVENTS)
    client.create_topic(ORDERS, {"ttl": "86400"})
    client.publish(EVENTS, [b'{"order": 17, "state": "placed"}', b"\x00\x01\xfe\xff binary"])
    committed = tx.start_short()
    client.publish(
        EVENTS, [b'{"order": 17, "state": "paid"}'], tx_write_pointer=committed.write_pointer
    )
    tx.commit_or_throw(committed)
    undone = tx.start_short()
    token = client.publish(EVENTS, [b"rolled back"], tx_write_pointer=undone.write_pointer)
    assert token is not None
    client.rollback(EVENTS, token)
    tx.abort(undone)
    running = tx.start_long()
    client.publish(EVENTS, [b"still running"], tx_write_pointer=running.write_pointer)
    failed = tx.start_short()
    client.publish(EVENTS, [b"invalidated"], tx_write_pointer=failed.write_pointer)
    tx.invalidate(failed.transaction_id)
    for i in range(5):
        client.publish(ORDERS, [f"order {i}-{n}".encode() for n in range(4)])
    client.create_topic(JOBS, {"kind": "queue", "lease_s": "600"})
    jobs = client.queue(JOBS)
    jobs.enqueue([b"job 1", b"job 2", b"job 3", EnqueueItem(b"tomorrow", delay_ms=86_400_000)])
    jobs.receive(1)
    return {
        '{"order": 17, "state": "placed"}': "plain",
        '{"order": 17, "state": "paid"}': "committed",
        "rolled back": "rolled back",
        "still running": "in progress",
        "invalidated": "invalid",
    }


def wait_for(condition: Callable[[], Any], timeout_s: float = 20.0, what: str = "") -> Any:
    """Poll ``condition`` until it returns something truthy (a page updates itself)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception as exc:  # the element may not be there yet
            last = exc
        else:
            if value:
                return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or condition}: {last}")


def sign_in(driver: Any, url: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/ui/")
    field = wait_for(lambda: driver.find_element(By.ID, "token"), what="the sign-in form")
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "header.top"), what="the console")
