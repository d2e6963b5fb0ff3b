"""Spark integration (the ``spark`` extra): the ``tms`` data source.

``register(spark)`` makes ``format("tms")`` available in a session; with txms
installed, Spark also finds it by itself (the ``pyspark_tms`` module).
"""

from __future__ import annotations

from typing import Any

from tms.spark.source import TmsDataSource

__all__ = ["TmsDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``tms`` format with a ``SparkSession``."""
    spark.dataSource.register(TmsDataSource)
