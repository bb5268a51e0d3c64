"""The composition roots of Magnetar's long-running processes and what starts and watches them.

:mod:`.bookie_process`, :mod:`.broker_process` and :mod:`.standalone` build a process from its settings
(loaded by :mod:`.config`: flags > environment > config file > defaults); :mod:`.broker_admin`,
:mod:`.retention_policies` and :mod:`.metrics` wire the admin API, the retention service and the storage
metrics into a broker; :mod:`.bookie_settings` (a bookie process's settings: the server's plus
``gc``), :mod:`.gc_wiring` and :mod:`.gc_http_api` attach a garbage collector and its HTTP endpoints to a
bookie; :mod:`.cluster_init` writes and waits for the cluster's metadata;
:mod:`.dev_cluster`, :mod:`.supervisor` and :mod:`.zookeeper` run a local cluster (ZooKeeper included).
:mod:`.process_common` holds what every process shares (ready line, signals, GC tuning).
"""
