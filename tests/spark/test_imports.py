"""What each Python process Spark starts loads: only what its role needs (every
planner, committer and executor worker imports the data source in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_HEAVY = ("tms.client.rpc", "txn.rpc.client", "txn.manager", "tms.spark.lease", "requests")


def _loaded(code: str) -> set[str]:
    """The modules of ``tms``, ``txn`` and ``requests`` a fresh interpreter holds after
    ``code``."""
    probe = (
        f"{code}\nimport sys\n"
        "print('\\n'.join(m for m in sys.modules if m.split('.')[0] in ('tms', 'txn', 'requests')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


def test_the_data_source_alone_loads_no_reader_writer_or_client() -> None:
    loaded = _loaded("import pyspark_tms")
    assert "tms.spark.source" in loaded
    assert not loaded & {*_HEAVY, "tms.spark.read", "tms.spark.write", "tms.client.http"}


@pytest.mark.parametrize(
    ("module", "needed"),
    [
        ("tms.spark.read", set()),
        ("tms.spark.stream", set()),
        ("tms.spark.write", {"txn.rpc.client", "tms.spark.lease"}),
    ],
)
def test_a_role_loads_what_it_needs(module: str, needed: set[str]) -> None:
    loaded = _loaded(f"import {module}")
    assert loaded & set(_HEAVY) == needed


def test_an_http_client_from_the_options_loads_no_binary_protocol() -> None:
    loaded = _loaded(
        "from tms.spark.options import SourceOptions, Use\n"
        "SourceOptions.parse({'url': 'http://127.0.0.1:1', 'topic': 't'}, Use.READ)"
        ".messaging().close()"
    )
    assert "tms.client.http" in loaded
    assert "tms.client.rpc" not in loaded


def test_txn_names_load_on_first_use() -> None:
    assert "txn.manager" not in _loaded("import txn.codec")
    loaded = _loaded("from txn import TransactionManager, encode_transaction")
    assert "txn.manager" in loaded
    import txn

    assert set(txn.__all__) <= set(dir(txn))
    with pytest.raises(AttributeError):
        _ = txn.NoSuchName  # type: ignore[attr-defined]
