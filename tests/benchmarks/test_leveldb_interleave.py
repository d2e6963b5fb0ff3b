"""The payload-key layouts of ``benchmarks.leveldb_interleave`` on a real LevelDB: every
layout gives each write pointer back exactly its own rows."""

from __future__ import annotations

from pathlib import Path

import plyvel
import pytest

from benchmarks import leveldb_interleave as interleave


@pytest.mark.parametrize("layout", ["wp", "time", "time-index"])
def test_each_pointer_reads_back_its_own_rows(tmp_path: Path, layout: str) -> None:
    # Given 2,500 rows by two writers taking turns: batches of 1,000, 1,000 and 500
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    try:
        interleave._write(db, 2_500, 2, layout)
        # Then the first pointer reads its first and third batch, the second its second
        assert interleave._read_pointer(db, layout, interleave._FIRST_WP) == 1_500
        assert interleave._read_pointer(db, layout, interleave._FIRST_WP + 1) == 1_000
        assert interleave._read_pointer(db, layout, interleave._FIRST_WP + 2) == 0
    finally:
        db.close()


def test_one_case_reports_its_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_DIR", str(tmp_path))
    figures = interleave.one(3_000, 2, 1, "time")
    assert set(figures) == {
        "cpu",
        "leveldb_thread",
        "compaction_read_mb",
        "compaction_write_mb",
        "read_cpu",
    }
    assert all(v >= 0 for v in figures.values())
