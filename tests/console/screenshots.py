"""The screenshots of docs/console.md: ``make console-screenshots`` (or
``python -m tests.console.screenshots DIR``) seeds a standalone stack on free ports,
publishes for a few seconds so the charts have a shape, and saves each page of the
console as ``console-*.png`` in DIR. Not run by the test suite."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.console.browser import ORDERS, chrome, missing, seeded_stack, sign_in, wait_for
from tests.integration.test_ha_tms import TmsCluster
from tms.client import MessagingClient
from tms.model import TopicId
from tms.subscription import Preferences, Start, SubscriptionId
from txms_testing import PostgresCluster, ZooKeeperEnsemble


def main(out: Path) -> int:
    reason = missing()
    if reason is not None:
        print(f"cannot take screenshots: {reason}", file=sys.stderr)
        return 1
    from selenium.webdriver.common.by import By

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, seeded_stack(Path(tmp) / "data") as seeded:
        stop = threading.Event()

        def traffic() -> None:  # a little load, so the charts show something
            n = 0
            while not stop.is_set():
                seeded.client.publish(ORDERS, [f'{{"order": {n}}}'.encode()] * (1 + n % 7))
                seeded.client.poll(ORDERS, limit=50)
                n += 1
                time.sleep(0.05)

        seeded.client.create_subscription(SubscriptionId(ORDERS, "mailer"))
        seeded.client.create_subscription(
            SubscriptionId(ORDERS, "audit"), Preferences(start=Start.latest())
        )
        worker = threading.Thread(target=traffic, daemon=True)
        worker.start()
        time.sleep(12)
        try:
            with chrome(1440, 1100) as driver:
                driver.get(f"{seeded.stack.url}/ui/")
                wait_for(lambda: driver.find_element(By.ID, "token"))
                driver.save_screenshot(str(out / "console-sign-in.png"))
                sign_in(driver, seeded.stack.url, "admin-token")
                wait_for(
                    lambda: driver.find_elements(By.CSS_SELECTOR, "[data-chart=throughput] canvas"),
                    30,
                )
                time.sleep(2)
                driver.save_screenshot(str(out / "console-overview.png"))
                driver.get(f"{seeded.stack.url}/ui/#/topic/default/events")
                wait_for(
                    lambda: driver.find_elements(By.CSS_SELECTOR, "[data-table=messages] tbody tr")
                )
                time.sleep(1)
                driver.save_screenshot(str(out / "console-topic.png"))
                driver.find_element(By.CSS_SELECTOR, "button[data-mode=json]").click()
                time.sleep(0.5)
                driver.save_screenshot(str(out / "console-topic-json.png"))
                driver.get(f"{seeded.stack.url}/ui/#/topic/default/orders")
                panel = wait_for(
                    lambda: driver.find_elements(By.CSS_SELECTOR, "#panel-subscriptions table")
                )
                time.sleep(1)
                panel[0].screenshot(str(out / "console-subscriptions.png"))
                driver.get(f"{seeded.stack.url}/ui/#/topic/default/jobs")
                queue = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#panel-queue"))
                time.sleep(1)
                queue[0].screenshot(str(out / "console-queue.png"))
            with chrome(1440, 800) as driver:
                sign_in(driver, seeded.stack.url, "reader-token")
                wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "[data-table=topics]"))
                time.sleep(1)
                driver.save_screenshot(str(out / "console-reader.png"))
        finally:
            stop.set()
            worker.join(10)
    _instances(out)
    for name in sorted(out.glob("console-*.png")):
        print(name)
    return 0


def _instances(out: Path) -> None:
    """The overview's Instances panel of a cluster: a ZooKeeper ensemble, PostgreSQL and
    two ``tms serve`` instances, each owning topics."""
    from selenium.webdriver.common.by import By

    with (
        tempfile.TemporaryDirectory(prefix="txms-shots-zk-") as root,
        ZooKeeperEnsemble(root) as zk,
        PostgresCluster() as pg,
    ):
        cluster = TmsCluster(zk, pg.create_database("txms"), "/shots/tms")
        try:
            _a, url_a = cluster.serve("tms-1")
            _b, url_b = cluster.serve("tms-2")
            with MessagingClient(url_a) as on_a, MessagingClient(url_b) as on_b:
                for name in ("orders", "payments"):
                    on_a.create_topic(TopicId("shop", name))
                on_b.create_topic(TopicId("shop", "invoices"))
                on_b.publish(TopicId("shop", "orders"), [b"placed"])
            with chrome(1440, 900) as driver:
                driver.get(f"{url_b}/ui/#/ns/shop")
                panel = wait_for(
                    lambda: driver.find_elements(By.CSS_SELECTOR, "#panel-instances"), 30
                )
                time.sleep(1)
                panel[0].screenshot(str(out / "console-instances.png"))
        finally:
            for proc in cluster.procs:
                proc.stop(10)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img")))
