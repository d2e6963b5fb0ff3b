"""Found by Spark when it looks for Python data sources (modules named ``pyspark_*``
exporting ``DefaultSource``): ``format("tms")`` works without registering it."""

from tms.spark.source import TmsDataSource as DefaultSource

__all__ = ["DefaultSource"]
