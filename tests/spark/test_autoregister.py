"""Spark finds the ``tms`` format by itself (``pyspark_tms.DefaultSource``): a fresh
Spark, in its own process, with no ``register`` call and no path of ours on
``PYTHONPATH``, outside the checkout: only the installation (an editable one here, as
``make`` makes it) can make the format known."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.servers import Stack
from tms.model import TopicId

SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
url, tx = sys.argv[1], sys.argv[2]
df = spark.read.format("tms").options(url=url, topic="auto", txServer=tx).load()
print("ROWS", sorted(bytes(r.payload).decode() for r in df.collect()))
spark.stop()
"""


def test_spark_finds_the_format_without_registration(stack: Stack, tmp_path: Path) -> None:
    topic = TopicId("default", "auto")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, ["x", "y"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, stack.url, stack.tx_address],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert "ROWS ['x', 'y']" in done.stdout, done.stderr[-3000:]
