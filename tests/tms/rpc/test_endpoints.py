"""Addresses of tms:// URLs, and shielding the ones that keep failing."""

from __future__ import annotations

import pytest

from tms.errors import ServiceUnavailableError, TmsInvalidArgumentError
from tms.rpc.endpoints import DEFAULT_PORT, Endpoints, parse_url


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("url", "addresses", "tls"),
    [
        ("tms://h:1", [("h", 1)], False),
        ("tmss://a:1,b,[::1]:5", [("a", 1), ("b", DEFAULT_PORT), ("::1", 5)], True),
        ("tms://h/", [("h", DEFAULT_PORT)], False),
    ],
)
def test_urls(url: str, addresses: list[tuple[str, int]], tls: bool) -> None:
    assert parse_url(url) == (addresses, tls)


@pytest.mark.parametrize(
    "url",
    ["http://h:1", "tms://h:x", "tms://h:0", "tms://:5", "tms://h:1/p", "tms://h?x=1", "tms://"],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(TmsInvalidArgumentError):
        parse_url(url)


def test_an_address_failing_in_a_row_is_shielded_with_growing_periods() -> None:
    clock = Clock()
    e = Endpoints([("a", 1)], shield_after=2, shield_s=1.0, max_shield_s=3.0, monotonic=clock)
    a = ("a", 1)
    e.failed(a)
    assert e.pick() == a  # one failure: not yet
    e.failed(a)
    assert e.shielded(a)
    with pytest.raises(ServiceUnavailableError, match="shielded"):
        e.pick()  # fails fast, without connecting
    clock.now += 1.0
    assert e.pick() == a
    e.failed(a)  # the third in a row: 2 s
    clock.now += 1.5
    assert e.shielded(a)
    clock.now += 0.5
    e.failed(a)  # the fourth: capped at 3 s
    clock.now += 2.9
    assert e.shielded(a)
    clock.now += 0.1
    assert not e.shielded(a)
    e.succeeded(a)
    e.failed(a)
    assert not e.shielded(a)  # a success cleared the record


def test_a_shielded_address_is_skipped_for_the_others() -> None:
    clock = Clock()
    e = Endpoints([("a", 1), ("b", 2)], shield_after=1, monotonic=clock)
    assert e.pick() == ("a", 1)
    e.failed(("a", 1))
    assert e.pick() == ("b", 2)
    e.failed(("b", 2))
    with pytest.raises(ServiceUnavailableError):
        e.pick()
    clock.now += 1.0
    assert e.pick() in {("a", 1), ("b", 2)}
