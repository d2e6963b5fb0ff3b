"""LevelDB's write buffer and block cache as ``TmsConfig`` settings: validated, and the
size given is the one LevelDB flushes at (``tms serve``'s ``open_store`` path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tms.cluster.setup import StoreConfig, open_store
from tms.config import TmsConfig
from tms.errors import TmsInvalidArgumentError


@pytest.mark.parametrize(
    "values",
    [
        {"leveldb_write_buffer_mb": 0},
        {"leveldb_write_buffer_mb": 1025},  # LevelDB would silently cut it to 1 GiB
        {"leveldb_write_buffer_mb": -64},
        {"leveldb_write_buffer_mb": 64.0},  # a float from a TOML file
        {"leveldb_write_buffer_mb": True},
        {"leveldb_write_buffer_mb": "64"},
        {"leveldb_block_cache_mb": -1},
        {"leveldb_block_cache_mb": 65537},
        {"leveldb_block_cache_mb": 8.5},
    ],
)
def test_bad_leveldb_settings_are_refused(values: dict[str, object]) -> None:
    with pytest.raises(TmsInvalidArgumentError, match="leveldb_"):
        TmsConfig(**values)  # type: ignore[arg-type]


def test_leveldb_settings_defaults_and_options() -> None:
    assert TmsConfig().leveldb_options() == {
        "write_buffer_bytes": 64 << 20,
        "block_cache_bytes": 64 << 20,
    }
    config = TmsConfig(leveldb_write_buffer_mb=1024, leveldb_block_cache_mb=0)
    assert config.leveldb_options() == {"write_buffer_bytes": 1 << 30, "block_cache_bytes": 0}


def _files_in_levels(db: object) -> int:
    get = db.get_property  # type: ignore[attr-defined]
    return sum(int(get(f"leveldb.num-files-at-level{n}".encode())) for n in range(7))


@pytest.mark.parametrize(("buffer_mb", "flushed"), [(1, True), (64, False)])
def test_write_buffer_setting_is_where_leveldb_flushes(
    tmp_path: Path, buffer_mb: int, flushed: bool
) -> None:
    """4 MiB of writes: with a 1 MiB buffer LevelDB has flushed sorted files; with the
    64 MiB default everything is still in the buffer (and its log)."""
    config = TmsConfig(leveldb_write_buffer_mb=buffer_mb)
    store = open_store(StoreConfig(tmp_path / "tms"), config.leveldb_options()).store
    try:
        value = bytes(range(256)) * 16  # 4 KiB
        for i in range(1024):
            store.write([(b"t", i.to_bytes(4, "big"), value)], sync=False)
        assert (_files_in_levels(store.db) > 0) is flushed  # type: ignore[attr-defined]
    finally:
        store.close()
