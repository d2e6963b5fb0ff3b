"""The example pipeline (examples/program_states.py) against the real stack."""

from __future__ import annotations

from typing import Any

from examples import program_states as example
from tests.servers import Stack


def test_program_states_pipeline(spark: Any, stack: Stack) -> None:
    events = example.seed(stack.messaging, stack.tx, runs=60)
    assert events == 180
    written = example.summarize(spark, stack.url, stack.tx_address)
    published = example.committed(stack.messaging, stack.tx, example.SUMMARIES)
    assert published == written  # all summaries, in one commit, in order
    assert sorted(s["program"] for s in published) == sorted(example.PROGRAMS)
    assert sum(s["runs"] for s in published) == 60  # the open run is not counted
    assert all(s["completed"] + s["failed"] == s["runs"] for s in published)
