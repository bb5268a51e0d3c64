"""One local SparkSession (``local[2]``) for the whole test run, with the ``magnetar`` source registered.

PySpark facts (DESIGN.md §3): workers run ``PYSPARK_PYTHON`` (this interpreter, so they import ``magnetar``
from the same environment), Spark binds to ``SPARK_LOCAL_IP`` (127.0.0.1), nothing is downloaded
(no ``--packages``). The JVM logs at WARN and shows no progress bars. The session is stopped at the end of the
run, and the environment restored.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYSPARK_PYTHON", sys.executable)
        env.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        from magnetar.admin.spark import MagnetarDataSource

        builder = SparkSession.builder.master("local[2]").appName("magnetar-tests")
        for key, value in SPARK_CONF.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("WARN")
        session.dataSource.register(MagnetarDataSource)
        try:
            yield session
        finally:
            session.stop()
