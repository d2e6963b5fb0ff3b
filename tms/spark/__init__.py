"""Spark integration (the ``spark`` extra): the ``tms`` data source.

``register(spark)`` makes ``format("tms")`` available in a session; with txms
installed, Spark also finds it by itself (the ``pyspark_tms`` module).
``local_session`` is a quiet session with the format registered, for examples, tools and
benchmarks: it runs where ``spark-submit --master`` (or ``SPARK_MASTER``) says, locally
when nothing says.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tms.spark.source import TmsDataSource

__all__ = ["TmsDataSource", "local_session", "register", "resolve_master"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: Spark's modules take a while to import, and the lease keeper
    # (``python -m tms.spark.lease``) needs none of them.
    if name == "TmsDataSource":
        from tms.spark.source import TmsDataSource  # noqa: PLC0415

        return TmsDataSource
    raise AttributeError(name)


def register(spark: Any) -> None:
    """Register the ``tms`` format with a ``SparkSession``."""
    from tms.spark.source import TmsDataSource  # noqa: PLC0415

    spark.dataSource.register(TmsDataSource)


def resolve_master(
    given: str | None, configured: str | None, environ: dict[str, str] | None = None
) -> str | None:
    """The master to set on the builder: ``given`` (the caller's), else None when Spark
    already has one (``spark-submit --master``, ``spark-defaults.conf``), else
    ``SPARK_MASTER``, else ``local[*]``."""
    if given:
        return given
    if configured:
        return None
    return (environ if environ is not None else dict(os.environ)).get("SPARK_MASTER") or "local[*]"


def local_session(app: str, master: str | None = None, **conf: str) -> Any:
    """A ``SparkSession`` (no UI, no progress bars, errors-only logging) with the ``tms``
    format registered, on ``master`` or where Spark was told to run (see
    ``resolve_master``). Local executors run this interpreter unless ``PYSPARK_PYTHON``
    says otherwise."""
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415 - loads Spark: late
    from pyspark.sql import SparkSession  # noqa: PLC0415

    # Under spark-submit the JVM is already there and holds --master as a system
    # property; SparkConf reads those only once the gateway to it is open.
    SparkContext._ensure_initialized()
    chosen = resolve_master(master, SparkConf().get("spark.master", None))
    if chosen is not None and chosen.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if chosen is not None:
        builder = builder.master(chosen)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
