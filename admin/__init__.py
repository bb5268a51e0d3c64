"""The top layer: admin REST API, the ``magnetar`` command line (composition root) and the Spark source."""
