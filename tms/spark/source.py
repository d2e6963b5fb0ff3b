"""``TmsDataSource``: the ``tms`` format for Spark's Python Data Source API (Spark 4).

::

    from tms.spark import register
    register(spark)                      # or install txms: pyspark_tms registers it
    df = (spark.read.format("tms")
          .option("url", "http://127.0.0.1:15166").option("topic", "events")
          .option("txServer", "127.0.0.1:15165").load())
    df.write.format("tms").mode("append").option(...).save()

Options: ``tms.spark.options``. Reading: ``tms.spark.read``. Writing:
``tms.spark.write``. Only ``append`` writes are supported (a topic is append-only).
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
from tms.spark.options import SourceOptions
from tms.spark.read import SCHEMA, TmsFilteringReader, TmsReader, TmsStreamReader
from tms.spark.write import TmsStreamWriter, TmsWriter

__all__ = ["TmsDataSource"]


class TmsDataSource(DataSource):
    """See the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "tms"

    def schema(self) -> str:
        return SCHEMA

    def _options(self) -> SourceOptions:
        return SourceOptions.parse(dict(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._options()
        return TmsFilteringReader(options) if options.push_filters else TmsReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return TmsStreamReader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        return TmsWriter(self._options(), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        _append_only(overwrite)
        return TmsStreamWriter(self._options(), schema)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise TmsInvalidArgumentError("a tms topic is append-only: use mode('append')")
