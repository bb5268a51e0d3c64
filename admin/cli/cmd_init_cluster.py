"""``magnetar initialize-cluster-metadata``: cluster, tenant ``public``, namespace ``public/default``.

Idempotent (what exists is left alone) and patient: an unreachable store is retried ``--attempts-max`` times
with a doubling pause from ``--retry-delay-s``; each attempt waits up to ``metadata_operation_timeout_ms``
(``MAGNETAR_METADATA_OPERATION_TIMEOUT_MS``) for the store. This is what the Helm chart's init job runs, with
the cluster's service URLs (``ClusterData``, as Pulsar's ``--web-service-url``, ``--web-service-url-tls``,
``--broker-service-url``, ``--broker-service-url-tls``) and the bundle count of ``public/default``. The
store is reached as brokers reach it (``MAGNETAR_ZK_TLS_*``, see
:class:`~magnetar.admin.processes.cluster_init.MetadataClientSettings`). Prints one JSON line saying what was
initialized; exits 1 when the store stayed unreachable, 2 on a bad argument.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metadata-url",
        help="metadata store: zk:HOST:PORT[/chroot], rocksdb:///PATH (env MAGNETAR_METADATA_URL)",
    )
    parser.add_argument("--cluster", help="cluster name, e.g. standalone (env MAGNETAR_CLUSTER)")
    parser.add_argument(
        "--web-service-url", default="", help="the cluster's HTTP URL (ClusterData.serviceUrl)"
    )
    parser.add_argument(
        "--web-service-url-tls", default="", help="the cluster's HTTPS URL (ClusterData.serviceUrlTls)"
    )
    parser.add_argument("--broker-service-url", default="", help="ClusterData.brokerServiceUrl")
    parser.add_argument("--broker-service-url-tls", default="", help="ClusterData.brokerServiceUrlTls")
    parser.add_argument("--bundles", type=int, default=4, help="bundles of public/default (default 4)")
    parser.add_argument("--attempts-max", type=int, default=10, help="tries while the store is unreachable")
    parser.add_argument("--retry-delay-s", type=float, default=1.0, help="first pause between tries")


def run(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import trio  # noqa: PLC0415

    from magnetar.admin.processes.cluster_init import (  # noqa: PLC0415
        ClusterInit,
        MetadataClientSettings,
        initialize_with_retries,
    )
    from magnetar.admin.processes.config import ConfigError, load_settings, warn_unknown_environment  # noqa: PLC0415
    from magnetar.bookkeeper.metadata import MetadataStoreError, StoreUnavailableError  # noqa: PLC0415

    try:
        overrides = {"metadata_url": args.metadata_url, "cluster": args.cluster}
        settings = load_settings(MetadataClientSettings, overrides).settings
        store_settings = settings.metadata_settings()
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    warn_unknown_environment(MetadataClientSettings)
    url = settings.metadata_url
    if not url:
        print("error: --metadata-url (or MAGNETAR_METADATA_URL) is required", file=sys.stderr)
        return 2
    if not settings.cluster:
        print("error: --cluster (or MAGNETAR_CLUSTER) is required", file=sys.stderr)
        return 2
    try:
        init = ClusterInit(
            settings.cluster,
            args.web_service_url,
            args.broker_service_url,
            args.bundles,
            web_service_url_tls=args.web_service_url_tls,
            broker_service_url_tls=args.broker_service_url_tls,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(
            lambda: initialize_with_retries(
                url,
                init,
                attempts_max=max(1, args.attempts_max),
                retry_delay_s=args.retry_delay_s,
                settings=store_settings,
            )
        )
    except StoreUnavailableError as exc:
        print(f"error: metadata store unavailable: {exc}", file=sys.stderr)
        return 1
    except (MetadataStoreError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"cluster": init.cluster, "tenant": "public", "namespace": "public/default"}))
    return 0
