"""``TmsDataSource``: the ``tms`` format for Spark's Python Data Source API (Spark 4.2+).

::

    from tms.spark import register
    register(spark)                      # or install txms: pyspark_tms registers it
    df = (spark.read.format("tms")
          .option("url", "http://127.0.0.1:15166").option("topic", "events")
          .option("txServer", "127.0.0.1:15165").load())
    df.write.format("tms").mode("append").option(...).save()

Options: ``tms.spark.options`` (unknown ones are refused). Reading: ``tms.spark.read``
and ``tms.spark.stream``. Writing: ``tms.spark.write`` and ``tms.spark.stream_write``.
Only ``append`` writes are supported (a topic is append-only).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from tms.errors import TmsInvalidArgumentError
from tms.spark.options import SourceOptions, Use

__all__ = ["TmsDataSource"]

# The readers and writers load on first use: every Python process Spark starts for a
# job (the planners, the committer, each task's worker) imports this module, and each
# needs one of them at most (``tms.spark.read`` re-exports the schema).
SCHEMA = "id string, publish_time timestamp, payload binary, topic string"


class TmsDataSource(DataSource):
    """See the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "tms"

    def schema(self) -> str:
        return SCHEMA

    def _options(self, use: Use) -> SourceOptions:
        return SourceOptions.parse(dict(self.options), use)

    def reader(self, schema: StructType) -> DataSourceReader:
        from tms.spark.read import TmsFilteringReader, TmsReader  # noqa: PLC0415 - see SCHEMA

        options = self._options(Use.READ)
        return TmsFilteringReader(options) if options.push_filters else TmsReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from tms.spark.stream import TmsStreamReader  # noqa: PLC0415 - see SCHEMA

        return TmsStreamReader(self._options(Use.STREAM_READ))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from tms.spark.write import TmsWriter  # noqa: PLC0415 - see SCHEMA

        _append_only(overwrite)
        return TmsWriter(self._options(Use.WRITE), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from tms.spark.stream_write import TmsStreamWriter  # noqa: PLC0415 - see SCHEMA

        _append_only(overwrite)
        return TmsStreamWriter(self._options(Use.STREAM_WRITE), schema)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise TmsInvalidArgumentError("a tms topic is append-only: use mode('append')")
