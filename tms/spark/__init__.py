"""Spark integration (the ``spark`` extra): the ``tms`` data source.

``register(spark)`` makes ``format("tms")`` available in a session; with txms
installed, Spark also finds it by itself (the ``pyspark_tms`` module).
``local_session`` is a quiet local Spark with the format registered, for examples,
tools and benchmarks.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tms.spark.source import TmsDataSource

__all__ = ["TmsDataSource", "local_session", "register"]


def register(spark: Any) -> None:
    """Register the ``tms`` format with a ``SparkSession``."""
    spark.dataSource.register(TmsDataSource)


def local_session(app: str, master: str = "local[2]", **conf: str) -> Any:
    """A local ``SparkSession`` (no UI, no progress bars, errors-only logging) with the
    ``tms`` format registered. Executors run this interpreter unless ``PYSPARK_PYTHON``
    says otherwise."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - Spark starts a JVM; load it late

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
