"""The PySpark data source ``magnetar``: topics read by Structured Streaming micro-batches and batch queries.

``spark.dataSource.register(MagnetarDataSource)``, then ``spark.readStream.format("magnetar")`` (options in
:mod:`.options`, offsets in :mod:`.offsets`, columns in :mod:`.rows`, how a query runs in :mod:`.source`).
Needs the ``spark`` extra (pyspark >= 4.0, pyarrow). A client of the admin REST API: it imports only the
broker's sans-IO formats and :mod:`magnetar.admin.range_frames`, so Spark workers import it cheaply.
"""

from magnetar.admin.spark.source import MagnetarBatchReader, MagnetarDataSource, MagnetarStreamReader

__all__ = ["MagnetarBatchReader", "MagnetarDataSource", "MagnetarStreamReader"]
