"""``magnetar dev-cluster --zk N --bookies N --brokers N --data-dir D``: a real local cluster until Ctrl-C.

Starts ZooKeeper from Debian (an ensemble of N servers), N ``magnetar bookie`` processes with disk storage
and N ``magnetar broker`` processes, each on free ports kept in ``D/dev-cluster.json`` (the same ports and
data again next time), see :mod:`magnetar.admin.processes.dev_cluster`. Progress and the URLs go to stderr;
once everything serves, one JSON line ``{"event": "dev-cluster-ready", "metadataUrl": ..., "brokers": [...]}``
goes to stdout. Ctrl-C (SIGINT) or SIGTERM stops every process by pid (brokers, bookies, then ZooKeeper);
a component that fails to start stops everything and exits 1 with its log.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zk", type=int, default=1, help="ZooKeeper servers (default 1; 3 = an ensemble)")
    parser.add_argument("--bookies", type=int, default=3, help="bookie processes (default 3)")
    parser.add_argument("--brokers", type=int, default=2, help="broker processes (default 2)")
    parser.add_argument(
        "--data-dir", default="dev-cluster", help="data, logs and ports (default ./dev-cluster)"
    )
    parser.add_argument("--cluster", default="dev", help="cluster name (default dev)")
    parser.add_argument("--ensemble-size", type=int, help="bookies per ledger (default 2; 1 with one bookie)")
    parser.add_argument("--write-quorum", type=int, help="copies of each entry (default 2)")
    parser.add_argument("--ack-quorum", type=int, help="acks needed per entry (default 2)")
    parser.add_argument(
        "--session-timeout-ms", type=int, default=10_000, help="ZooKeeper session timeout (default 10000)"
    )
    parser.add_argument(
        "--bookie-storage", choices=["disk", "memory"], default="disk", help="bookie storage engine"
    )
    parser.add_argument(
        "--authentication-enabled",
        action="store_true",
        help="token authentication: key and tokens under DATA_DIR/security (admin.token for clients)",
    )


def run(args: argparse.Namespace) -> int:
    import logging  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    import trio  # noqa: PLC0415

    from magnetar.admin.processes.dev_cluster import DevClusterSpec  # noqa: PLC0415
    from magnetar.admin.processes.process_common import describe  # noqa: PLC0415

    try:
        spec = DevClusterSpec(
            data_dir=Path(args.data_dir),
            zookeepers=args.zk,
            bookies=args.bookies,
            brokers=args.brokers,
            ensemble_size=args.ensemble_size,
            write_quorum=args.write_quorum,
            ack_quorum=args.ack_quorum,
            cluster=args.cluster,
            bookie_storage=args.bookie_storage,
            session_timeout_ms=args.session_timeout_ms,
            log_level=args.log_level,
            authentication=args.authentication_enabled,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return trio.run(serve, spec)
    except Exception as exc:  # ExceptionGroup included: a component that did not start
        logging.getLogger("magnetar.dev_cluster").error("dev cluster failed: %s", describe(exc))
        return 1


async def serve(spec: object) -> int:
    import json  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import trio  # noqa: PLC0415

    from magnetar.admin.processes.dev_cluster import DevClusterSpec, open_dev_cluster  # noqa: PLC0415
    from magnetar.admin.processes.process_common import STOP_SIGNALS  # noqa: PLC0415

    assert isinstance(spec, DevClusterSpec)
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        stop = trio.Event()

        async def watch_signals() -> None:
            # Every signal is consumed here: one left pending when the receiver closes would be re-delivered
            # (a second Ctrl-C or a SIGTERM arriving while the cluster stops would then kill this process).
            async for signum in signals:
                name = signal.Signals(signum).name
                if stop.is_set():
                    print(f"received {name}: already stopping", file=sys.stderr, flush=True)
                else:
                    print(f"received {name}: stopping the dev cluster", file=sys.stderr, flush=True)
                    stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_signals)
            async with open_dev_cluster(spec) as cluster:
                print(_summary(cluster.ready_document(), spec), file=sys.stderr, flush=True)
                print(json.dumps(cluster.ready_document()), flush=True)
                await stop.wait()
            nursery.cancel_scope.cancel()
    print("dev cluster stopped", file=sys.stderr, flush=True)
    return 0


def _summary(ready: dict[str, Any], spec: Any) -> str:
    e, w, a = spec.quorums()
    lines = [
        f"dev cluster ready (data and logs in {ready['dataDir']}; E/W/A {e}/{w}/{a}):",
        f"  metadata store  {ready['metadataUrl']}",
        *(f"  {z['name']:<15} 127.0.0.1:{z['clientPort']} (pid {z['pid']})" for z in ready["zookeepers"]),
        *(f"  {b['name']:<15} {b['bookieId']} (http {b['httpPort']}, pid {b['pid']})"
          for b in ready["bookies"]),
        *(f"  {b['name']:<15} {b['httpUrl']}  {b['wsUrl']}/ws/v2/...  (pid {b['pid']})"
          for b in ready["brokers"]),
        *([f"  authentication on: superuser token in {ready['adminTokenFile']}"] if "adminTokenFile" in ready
          else []),
        "Ctrl-C stops everything.",
    ]  # fmt: skip
    return "\n".join(lines)
