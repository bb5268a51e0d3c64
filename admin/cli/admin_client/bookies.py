"""``magnetar admin bookies``: AutoRecovery and bookie administration, through a bookie's REST API.

BookKeeper's own tools are shell commands talking to ZooKeeper (``bookkeeper shell listunderreplicated``,
``decommissionbookie``, ``recover``, ``autorecovery -disable``) plus the bookie HTTP API. Here every verb is
a call to the HTTP API of *any* bookie (``--bookie-url``, env ``MAGNETAR_BOOKIE_URL``, default
``http://127.0.0.1:8000``, BookKeeper's default HTTP port): the bookie reads and writes the metadata store
for the whole cluster and runs decommission / recover jobs itself, so this tool needs no metadata-store
access, no ZooKeeper client and no bookie protocol. ``--auth-token`` is sent as with the admin API.

* ``list`` - writable, read-only and decommissioning bookies, and the auditor;
* ``list-under-replicated [--missing-replica B] [--excluding-missing-replica B]`` - marked ledgers with the
  bookies they miss;
* ``decommission BOOKIE`` / ``recover BOOKIE`` - start the job and print a progress line every
  ``--interval-s`` (ledgers done, bytes copied, rate, ETA) until it ends (``--no-wait``: start and return);
* ``replication enable|disable|status`` - the cluster-wide switch; ``audit`` - audit now;
  ``lost-bookie-recovery-delay [SECONDS]`` - read or set the delay.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from magnetar.admin.cli.admin_client.client import AdminApiError, AdminClient
from magnetar.admin.cli.admin_client.verbs import UsageError, Verb, combine, option
from magnetar.bookkeeper.runtime.auth.keys import read_token_setting

DEFAULT_BOOKIE_URL = "http://127.0.0.1:8000"
A = argparse.Namespace
C = AdminClient
AR = "/api/v1/autorecovery"


def _bookie_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bookie-url",
        default=os.environ.get("MAGNETAR_BOOKIE_URL", DEFAULT_BOOKIE_URL),
        help=f"HTTP URL of any bookie (env MAGNETAR_BOOKIE_URL, default {DEFAULT_BOOKIE_URL})",
    )


def _bookie(args: A) -> AdminClient:
    token = read_token_setting(args.auth_token, "--auth-token") if args.auth_token else None
    return AdminClient(args.bookie_url, token=token)


def _not_found_is_empty(call: Any, empty: Any) -> Any:
    """BookKeeper answers 404 for "nothing there" (no marks, no auditor)."""
    try:
        return call()
    except AdminApiError as exc:
        if exc.status == 404:
            return empty
        raise


def _list(_: C, args: A) -> dict[str, Any]:
    with _bookie(args) as bookie:
        writable = bookie.get("/api/v1/bookie/list_bookies", type="rw")
        readonly = bookie.get("/api/v1/bookie/list_bookies", type="ro")
        info = bookie.get("/api/v1/bookie/cluster_info")
    return {
        "writable": sorted(writable),
        "readonly": sorted(readonly),
        "auditor": info.get("auditorId") or None,
        "replicationEnabled": info.get("ledgerReplicationEnabled"),
        "underReplicated": info.get("clusterUnderReplicated"),
        "unavailable": info.get("unavailableBookiesCount"),
    }


def _list_under_replicated(_: C, args: A) -> Any:
    params: dict[str, Any] = {"printmissingreplica": "true"}
    if args.missing_replica:
        params["missingreplica"] = args.missing_replica
    if args.excluding_missing_replica:
        params["excludingmissingreplica"] = args.excluding_missing_replica
    with _bookie(args) as bookie:
        found = _not_found_is_empty(lambda: bookie.get(f"{AR}/list_under_replicated_ledger", **params), {})
    return [{"ledgerId": int(ledger), "missingReplicas": replicas} for ledger, replicas in found.items()]


def progress_line(p: dict[str, Any]) -> str:
    eta = p.get("etaSeconds")
    rate = float(p.get("rateBytesPerSecond") or 0.0)
    return (
        f"{p['operation']} {p['bookie']}: {p['state']}, ledgers {p['ledgersDone']}/{p['ledgersTotal']}, "
        f"{p['bytesCopied'] / 1e6:.1f} MB copied ({p['entriesCopied']} entries), "
        f"{rate / 1e6:.2f} MB/s, ETA {'-' if eta is None else f'{eta:.0f} s'}, "
        f"{p['elapsedSeconds']:.0f} s elapsed" + (", cookie deleted" if p.get("cookieDeleted") else "")
    )


def _job(kind: str, path: str, body: Any, args: A) -> dict[str, Any]:
    if args.interval_s <= 0:
        raise UsageError("--interval-s must be positive")
    with _bookie(args) as bookie:
        bookie.put(f"{AR}/{path}", body)
        progress: dict[str, Any] = bookie.get(f"{AR}/{path}", bookie_src=args.bookie)
        while not args.no_wait and progress["state"] == "running":
            print(progress_line(progress), file=sys.stderr, flush=True)
            time.sleep(args.interval_s)
            progress = bookie.get(f"{AR}/{path}", bookie_src=args.bookie)
    print(progress_line(progress), file=sys.stderr, flush=True)
    if progress["state"] == "failed":
        raise AdminApiError(0, f"{kind} of {args.bookie} failed: {'; '.join(progress['errors'])}")
    return progress


def _decommission(_: C, args: A) -> dict[str, Any]:
    return _job("decommission", "decommission", {"bookie_src": args.bookie}, args)


def _recover(_: C, args: A) -> dict[str, Any]:
    return _job("recover", "bookie", {"bookie_src": [args.bookie], "delete_cookie": False}, args)


def _replication(_: C, args: A) -> Any:
    with _bookie(args) as bookie:
        if args.switch == "status":
            return bookie.get(f"{AR}/status")
        return bookie.put(f"{AR}/status", None, enabled=str(args.switch == "enable").lower())


def _audit(_: C, args: A) -> Any:
    with _bookie(args) as bookie:
        return bookie.put(f"{AR}/trigger_audit")


def _delay(_: C, args: A) -> Any:
    with _bookie(args) as bookie:
        if args.seconds is not None:
            bookie.put(f"{AR}/lost_bookie_recovery_delay", {"delay_seconds": args.seconds})
        text = str(bookie.get(f"{AR}/lost_bookie_recovery_delay"))
    return {"lostBookieRecoveryDelaySeconds": int(text.rsplit(":", 1)[1])}


def _job_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bookie", help="the bookie id, host:port")
    parser.add_argument("--interval-s", type=float, default=5.0, help="seconds between progress lines")
    parser.add_argument("--no-wait", action="store_true", help="start the job and return")


BOOKIES = [
    Verb("list", "list the bookies (writable, read-only), the auditor and the replication state", _list,
         _bookie_url),
    Verb("list-under-replicated", "list the ledgers marked under-replicated", _list_under_replicated,
         combine(_bookie_url, option("--missing-replica", help="only ledgers missing this bookie"),
                 option("--excluding-missing-replica", help="only ledgers not missing this bookie"))),
    Verb("decommission", "move every ledger off a bookie (alive or dead), with progress", _decommission,
         combine(_bookie_url, _job_flags)),
    Verb("recover", "copy a dead bookie's ledgers to other bookies, with progress", _recover,
         combine(_bookie_url, _job_flags)),
    Verb("replication", "enable or disable re-replication cluster-wide (autorecovery -disable)", _replication,
         combine(_bookie_url, option("switch", choices=["enable", "disable", "status"]))),
    Verb("audit", "make the auditor audit now (every missing bookie counts as lost)", _audit, _bookie_url),
    Verb("lost-bookie-recovery-delay", "read (or set) how long a bookie may be gone before healing starts",
         _delay, combine(_bookie_url, option("seconds", nargs="?", type=int, help="new delay in seconds"))),
]  # fmt: skip
