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
from tms.subscription import Preferences, Start, SubscriptionId


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
            with chrome(1440, 800) as driver:
                sign_in(driver, seeded.stack.url, "reader-token")
                wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "[data-table=topics]"))
                time.sleep(1)
                driver.save_screenshot(str(out / "console-reader.png"))
        finally:
            stop.set()
            worker.join(10)
    for name in sorted(out.glob("console-*.png")):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img")))
