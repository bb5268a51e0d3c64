"""One local SparkSession (``local[2]``) for the whole test run, with the ``magnetar`` source registered.

PySpark facts (docs/upstream.md, PySpark): workers run ``PYSPARK_PYTHON`` (this interpreter, so they import
``magnetar`` from the same environment), Spark binds to ``SPARK_LOCAL_IP`` (127.0.0.1), nothing is downloaded
(no ``--packages``). The JVM logs at WARN and shows no progress bars. The session is stopped at the end of the
run and its JVM process ended (by pid: ``SparkSession.stop`` leaves the gateway JVM running until the Python
process exits), and the environment restored.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

JVM_STOP_TIMEOUT_S = 30
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
            _stop_jvm()


def _stop_jvm() -> None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is not None:
        if process.stdin is not None:  # the gateway JVM watches this pipe (and the handle must not leak)
            process.stdin.close()
        process.terminate()
        try:
            process.wait(JVM_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(JVM_STOP_TIMEOUT_S)
    SparkContext._gateway = None
    SparkContext._jvm = None
