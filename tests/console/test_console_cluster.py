"""The console's overview of a cluster: two ``tms serve --zookeeper ... --store
postgresql://...`` instances on the test ZooKeeper ensemble and PostgreSQL, the page of
one of them in headless Chromium listing both instances and the topics each owns, as
``/v1/cluster`` says (a standalone service shows no such panel: ``test_console``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.console.browser import chrome, missing, wait_for
from tests.integration.test_ha_tms import TmsCluster
from tms.client import MessagingClient
from tms.model import TopicId
from txms_testing import ZooKeeperEnsemble

reason = missing()
pytestmark = pytest.mark.skipif(reason is not None, reason=reason or "")

if reason is None:
    from selenium.webdriver.common.by import By

_bases = itertools.count(1)


@pytest.fixture
def cluster(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[TmsCluster]:
    c = TmsCluster(zk_ensemble, pg_url, f"/console{next(_bases)}/tms")
    yield c
    for proc in c.procs:
        proc.kill()


def rows(driver: Any) -> dict[str, str]:
    """Instance id -> its 'topics owned' cell."""
    found = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "[data-table=instances] tbody tr"):
        owns = row.find_element(By.CSS_SELECTOR, "[data-field=owns]").text
        found[row.get_attribute("data-instance")] = owns
    return found


def test_overview_lists_the_instances_and_what_each_owns(
    cluster: TmsCluster, tmp_path: Path
) -> None:
    # Given two instances, a owning two topics and b one
    _a, url_a = cluster.serve("a")
    _b, url_b = cluster.serve("b")
    with MessagingClient(url_a) as on_a, MessagingClient(url_b) as on_b:
        for name in ("t1", "t2"):
            on_a.create_topic(TopicId("ns", name))
        on_b.create_topic(TopicId("ns", "t3"))
        on_b.publish(TopicId("ns", "t1"), [b"through b"])  # redirected to a
    status = requests.get(f"{url_b}/v1/cluster", timeout=30).json()
    assert sorted(status["owners"].values()) == ["a", "a", "b"]
    # When b's console shows the overview
    with chrome() as driver:
        driver.get(f"{url_b}/ui/#/ns/ns")
        wait_for(lambda: len(rows(driver)) == 2, what="both instances")
        # Then it lists both, with the topics each owns, and which one answered
        assert rows(driver) == {"a": "2", "b": "1"}
        me = driver.find_element(By.CSS_SELECTOR, "[data-instance=b]").text
        assert "this one" in me and url_b in me
        owned = driver.find_element(By.CSS_SELECTOR, "#panel-instances [data-field=ownedTopics]")
        assert owned.text == "3"
        driver.save_screenshot(str(tmp_path / "instances.png"))
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, severe
