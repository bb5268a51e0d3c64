"""``magnetar wait-for-metadata``: wait until the metadata store answers (and holds what a process needs).

The Helm chart's init containers run it before a bookie or broker starts, as Pulsar's chart waits for
ZooKeeper and for the cluster's metadata: without it a process started before ZooKeeper serves gives up after
``metadata_operation_timeout_ms`` and its pod goes into CrashLoopBackOff. It creates nothing. Every check
that finds something missing logs one line saying what (the store unreachable and why, the cluster not
initialized yet, too few writable bookies). ``--cluster`` waits for what ``initialize-cluster-metadata``
writes (the chart's init job); ``--bookies-min`` for that many writable bookies. The store is reached as the
processes reach it (``MAGNETAR_METADATA_*``, ``MAGNETAR_ZK_TLS_*``). Exits 0 once everything is there, 1
after ``--timeout-s`` (0 waits for ever), 2 on a bad argument.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata-url", help="metadata store (env MAGNETAR_METADATA_URL)")
    parser.add_argument(
        "--cluster",
        help="also wait for the metadata initialize-cluster-metadata writes for this cluster (brokers)",
    )
    parser.add_argument(
        "--bookies-min", type=int, default=0, help="also wait for this many writable bookies (default 0)"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=0.0, help="give up (exit 1) after this long; 0 waits for ever"
    )
    parser.add_argument("--check-interval-s", type=float, default=3.0, help="pause between checks")


def run(args: argparse.Namespace) -> int:
    import sys  # noqa: PLC0415

    import trio  # noqa: PLC0415

    from magnetar.admin.processes.cluster_init import (  # noqa: PLC0415
        Awaited,
        MetadataClientSettings,
        MetadataWaitTimeoutError,
        wait_for_metadata,
    )
    from magnetar.admin.processes.config import ConfigError, load_settings, warn_unknown_environment  # noqa: PLC0415
    from magnetar.bookkeeper.metadata import MetadataStoreError  # noqa: PLC0415

    try:
        settings = load_settings(MetadataClientSettings, {"metadata_url": args.metadata_url}).settings
        store_settings = settings.metadata_settings()
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    warn_unknown_environment(MetadataClientSettings)
    if not settings.metadata_url:
        print("error: --metadata-url (or MAGNETAR_METADATA_URL) is required", file=sys.stderr)
        return 2
    if args.bookies_min < 0 or args.timeout_s < 0 or args.check_interval_s <= 0:
        print("error: --bookies-min and --timeout-s must be >= 0, --check-interval-s > 0", file=sys.stderr)
        return 2
    url = settings.metadata_url
    awaited = Awaited(cluster=args.cluster, bookies_min=args.bookies_min)
    try:
        trio.run(
            lambda: wait_for_metadata(
                url,
                awaited,
                settings=store_settings,
                timeout_s=args.timeout_s,
                check_interval_s=args.check_interval_s,
            )
        )
    except MetadataWaitTimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except MetadataStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
