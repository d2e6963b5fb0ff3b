"""The public API of ``tms``: what ``__all__`` names is there, comes from where it says,
loads only when used, and is enough to run the core."""

from __future__ import annotations

import subprocess
import sys

import tms


def test_all_names_exactly_the_exports_and_each_resolves() -> None:
    assert tms.__all__ == sorted(tms.__all__)
    assert set(tms.__all__) == set(tms._HOME_OF)
    for name in tms.__all__:
        value = getattr(tms, name)
        home = tms._HOME_OF[name]
        assert value is getattr(sys.modules[home], name)
        assert getattr(value, "__module__", home).startswith("tms"), name
    assert set(tms.__all__) <= set(dir(tms))


def test_every_error_class_is_exported() -> None:
    from tms import errors

    assert {n for n in errors.__all__ if n.endswith("Error")} <= set(tms.__all__)


def test_unknown_names_are_attribute_errors() -> None:
    try:
        tms.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_tms_loads_neither_the_service_nor_the_client() -> None:
    code = (
        "import sys, tms, tms.errors; "
        "loaded = [m for m in ('tms.service', 'tms.client', 'aiohttp') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_core_runs_on_the_public_names() -> None:
    from tms import (
        FetchRequest,
        MemoryStore,
        MessagingService,
        Publish,
        StoreRequest,
        TopicId,
    )

    svc = MessagingService(MemoryStore())
    try:
        topic = TopicId("ns", "api")
        svc.create_topic(topic)
        assert svc.submit(Publish(StoreRequest.of(topic, ["hello"]))) is None
        assert [m.payload for m in svc.fetch(topic, FetchRequest()).messages] == [b"hello"]
    finally:
        svc.close()
