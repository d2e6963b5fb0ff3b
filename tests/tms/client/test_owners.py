"""``OwnerRoutes``: where a binary client sends a topic's requests in a cluster."""

from __future__ import annotations

from dataclasses import dataclass

from tms.client.owners import MAX_HOPS, MAX_OWNERS, OwnerRoutes, redirect_of
from tms.errors import FencedError, NotOwnerError, TopicNotFoundError
from tms.rpc.endpoints import Address, Endpoints


@dataclass
class NamedPool:
    """A pool that only says where it goes."""

    endpoints: Endpoints
    closed: bool = False

    def close(self) -> None:
        self.closed = True


def routes() -> OwnerRoutes[NamedPool]:
    return OwnerRoutes(NamedPool(Endpoints([("given", 1)])), NamedPool, lambda a: Endpoints([a]))


def where(pool: NamedPool) -> Address:
    return pool.endpoints.pick()


def test_what_each_error_answer_means() -> None:
    assert redirect_of(NotOwnerError("x", "http://o:1", "tms://o:2")) == ("o", 2)
    assert redirect_of(NotOwnerError("x", "http://o:1")) is None  # owner changing: pause
    assert redirect_of(NotOwnerError("x", "", "nonsense")) is None
    assert redirect_of(FencedError("deposed")) is None
    assert redirect_of(TopicNotFoundError(None, "no")) is False


def test_a_topic_follows_its_owner_until_a_connection_fails() -> None:
    r = routes()
    assert where(r.pool("t")) == ("given", 1)
    # not_owner naming the owner: at once, to it; other topics stay
    assert r.redirect("t", NotOwnerError("x", "", "tms://o:2"), 0) == 0.0
    assert where(r.pool("t")) == ("o", 2) and where(r.pool("u")) == ("given", 1)
    # its connection failed: back to the given addresses
    r.lost("t", r.pool("t"))
    assert where(r.pool("t")) == ("given", 1)
    # fenced: the owner is forgotten, after a pause that grows with the hops
    r.redirect("t", NotOwnerError("x", "", "tms://o:2"), 0)
    assert 0 < r.redirect("t", FencedError("deposed"), 3) <= 1.0  # type: ignore[operator]
    assert r.pool("t") is r.default
    # not a redirection, or too many: the usual rules
    assert r.redirect("t", TopicNotFoundError(None, "no"), 0) is None
    assert r.redirect("t", NotOwnerError("x", "", "tms://o:2"), MAX_HOPS) is None


def test_owner_pools_are_bounded() -> None:
    r = routes()
    first = None
    for n in range(MAX_OWNERS + 1):
        r.redirect(f"t{n}", NotOwnerError("x", "", f"tms://o{n}:1"), 0)
        first = first or r.pool("t0")
    assert first is not None and first.closed  # the oldest went, closed
    assert r.pool("t0") is r.default
    assert where(r.pool(f"t{MAX_OWNERS}")) == (f"o{MAX_OWNERS}", 1)
    r.close()
    assert r.pool(f"t{MAX_OWNERS}") is r.default
