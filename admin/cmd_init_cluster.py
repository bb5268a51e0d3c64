"""``magnetar initialize-cluster-metadata``: cluster, tenant ``public``, namespace ``public/default``.

Idempotent (what exists is left alone) and patient: an unreachable store is retried ``--attempts-max`` times
with a doubling pause from ``--retry-delay-s``. This is what the Helm chart's init job runs. Prints one JSON
line saying what was initialized; exits 1 when the store stayed unreachable, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metadata-url",
        default=os.environ.get("MAGNETAR_METADATA_URL"),
        help="metadata store: zk:HOST:PORT[/chroot], rocksdb:///PATH (env MAGNETAR_METADATA_URL)",
    )
    parser.add_argument("--cluster", required=True, help="cluster name (e.g. standalone)")
    parser.add_argument(
        "--web-service-url", default="", help="the cluster's HTTP URL (ClusterData.serviceUrl)"
    )
    parser.add_argument("--broker-service-url", default="", help="ClusterData.brokerServiceUrl")
    parser.add_argument("--bundles", type=int, default=4, help="bundles of public/default (default 4)")
    parser.add_argument("--attempts-max", type=int, default=10, help="tries while the store is unreachable")
    parser.add_argument("--retry-delay-s", type=float, default=1.0, help="first pause between tries")


def run(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import trio  # noqa: PLC0415

    from magnetar.admin.cluster_init import ClusterInit, initialize_with_retries  # noqa: PLC0415
    from magnetar.bookkeeper.metadata import MetadataStoreError, StoreUnavailableError  # noqa: PLC0415

    if not args.metadata_url:
        print("error: --metadata-url (or MAGNETAR_METADATA_URL) is required", file=sys.stderr)
        return 2
    try:
        init = ClusterInit(args.cluster, args.web_service_url, args.broker_service_url, args.bundles)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(
            lambda: initialize_with_retries(
                args.metadata_url,
                init,
                attempts_max=max(1, args.attempts_max),
                retry_delay_s=args.retry_delay_s,
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
