"""The Spark blocks of the docs (``<!-- doc-test: spark -->``) run as written, in this
process's Spark session, against the real stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.docblocks import DOCUMENTS, blocks, substitute
from tests.servers import Stack
from tms.model import StoreRequest, TopicId


def test_spark_blocks_run(spark: Any, stack: Stack, tmp_path: Path) -> None:
    spark_blocks = [b for d in DOCUMENTS for b in blocks(d) if b.spark]
    assert spark_blocks
    events, shouted = TopicId("demo", "events"), TopicId("demo", "shouted")
    for topic in (events, shouted):
        stack.service.create_topic(topic)
    stack.service.publish(StoreRequest.of(events, ["one", "two"]))
    namespace: dict[str, Any] = {}
    for block in spark_blocks:
        if not block.continues:
            namespace = {"__name__": "__main__"}
        code = substitute(block.code, stack.url, stack.tx_address)
        code = code.replace("/tmp/shout-ckpt", str(tmp_path / "ckpt"))
        exec(compile(code, block.name, "exec"), namespace)
    query = namespace["query"]  # the streaming example's query, stopped by the block
    assert not query.isActive
    assert sorted(m.payload for m in stack.service.fetch(shouted).messages) == [
        b"HELLO",
        b"ONE",
        b"TWO",
        b"WORLD",
    ]
