"""Spark's own cost of moving rows through a Python data source, with no server.

``tmsfloor`` is a data source with the ``tms`` format's schema that does nothing with
its rows: a write takes the Arrow batches Spark sends a task and counts them; a read
yields ready-made batches of the same shape as a ``tms`` read (ids, times, 100-byte
payloads, the topic), ``rows`` in all. What Spark's JVMs and Python workers spend on
such a job is the floor under any ``tms`` job over as many rows: a ``tms`` job can only
add to it (requests, encoding, the server).

Spark ships the classes by value (``register_pickle_by_value``): executors need not find
this module on their path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from tms.spark.arrow_codec import READ_SCHEMA
from tms.spark.read import SCHEMA

__all__ = ["FloorSource", "register"]

_CHUNK = 10_000


@dataclass(frozen=True)
class Counted(WriterCommitMessage):
    rows: int


@dataclass(frozen=True)
class Share(InputPartition):
    rows: int


class FloorWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return Counted(rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


class FloorReader(DataSourceReader):
    def __init__(self, rows: int, parts: int) -> None:
        self.rows, self.parts = rows, parts

    def partitions(self) -> list[InputPartition]:
        return [Share(self.rows // self.parts) for _ in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Share)
        full = _batch(_CHUNK)
        left = partition.rows
        while left > 0:
            yield full if left >= _CHUNK else full.slice(0, left)
            left -= _CHUNK


def _batch(rows: int) -> pa.RecordBatch:
    ids = [f"{i:040x}" for i in range(rows)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.string()),
            pa.array(list(range(rows)), pa.timestamp("us", tz="UTC")),
            pa.array([b"x" * 100] * rows, pa.binary()),
            pa.repeat(pa.scalar("floor", pa.string()), rows),
        ],
        schema=READ_SCHEMA,
    )


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tmsfloor"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return FloorReader(int(self.options["rows"]), int(self.options["partitions"]))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return FloorWriter()


def register(spark: Any) -> None:
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSource)
