"""The top layer: everything that runs, drives or reads Magnetar from outside its storage and broker layers.

One subpackage per kind:

- :mod:`.rest`: Pulsar's admin REST API v2, served by the broker's HTTP server.
- :mod:`.cli`: the ``magnetar`` command line (one ``cmd_*`` module per subcommand, loaded lazily) and the
  admin REST client behind ``magnetar admin`` (:mod:`.cli.admin_client`).
- :mod:`.spark`: the PySpark data source ``magnetar``.
- :mod:`.perf`: the load generators of ``magnetar perf`` (shipped with the package).
- :mod:`.processes`: the composition roots of the long-running processes (bookie, broker, standalone), their
  settings loading, the dev cluster, the supervisor and the ZooKeeper runner.

:mod:`.range_frames` (the framing of range reads, shared by :mod:`.rest` and :mod:`.spark`) and
:mod:`.pulsar_batch` (Pulsar's batch wire form, shared by :mod:`.rest` and the admin client in :mod:`.cli`)
sit beside them. ``tests/unit/test_architecture.py`` holds which subpackage may import which.
"""
