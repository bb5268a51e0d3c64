"""How much disk a ``magnetar standalone`` with its default settings gives back, and how fast, once topics go.

Run (not a test)::

    .venv/bin/python tests/bench/standalone_disk_return.py --megabytes 300 --topics 3
    .venv/bin/python tests/bench/standalone_disk_return.py --mode retention --megabytes 300 --topics 3

Starts ``magnetar standalone`` (default settings, except where the command's ``--env`` adds ``NAME=VALUE``),
publishes ``--megabytes`` of 1 KiB messages into ``--topics`` topics with ``magnetar perf produce`` (binary
protocol), then:

* ``--mode delete``: deletes the topics (``DELETE /admin/v2/persistent/public/default/<topic>``), which
  deletes their ledgers at once;
* ``--mode retention``: leaves the topics alone, with no subscription, so Pulsar's default retention (0 / 0)
  trims every closed ledger at the broker's next retention check; ``--entries-per-ledger`` (given to the
  broker as ``max_entries_per_ledger``) makes the published data span many ledgers;

and samples ``du -sB1`` of the data directory (blocks allocated: what the disk really lost) and of its parts
every ``--interval-s`` until it has stopped shrinking for ``--settle-s`` or ``--timeout-s`` passed. Prints the
timeline and one JSON summary line. The standalone is stopped by its pid at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def du_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (``du -sB1``), 0 when it does not exist."""
    if not path.exists():
        return 0
    out = subprocess.run(["du", "-sB1", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def parts(data_dir: Path) -> dict[str, int]:
    bookie = data_dir / "bookie-0"
    return {
        "total": du_bytes(data_dir),
        "journal": du_bytes(bookie / "journal"),
        "entry_logs": du_bytes(bookie / "ledgers"),
        "index": du_bytes(bookie / "index"),
        "metadata": du_bytes(data_dir / "metadata"),
    }


def mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def start_standalone(data_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    command = [
        sys.executable, "-m", "magnetar.admin.cli", "standalone",
        "--data-dir", str(data_dir), "--http-port", "0", "--bookie-port", str(free_port()),
    ]  # fmt: skip
    log = (data_dir.parent / "standalone.log").open("ab")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env={**os.environ, **env})
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"the standalone exited: see {data_dir.parent / 'standalone.log'}")
    ready: dict[str, Any] = json.loads(line)
    return process, str(ready["httpUrl"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def produce(url: str, topics: list[str], messages_per_topic: int) -> float:
    """Publish into every topic at once; the seconds it took."""
    began = time.monotonic()
    producers = []
    for topic in topics:
        command = [
            sys.executable, "-m", "magnetar.admin.cli", "perf", "produce", "--url", url,
            "--topic", f"persistent://public/default/{topic}", "--protocol", "binary", "--size", "1024",
            "--messages", str(messages_per_topic), "--duration-s", "3600", "--report-interval-s", "60",
        ]  # fmt: skip
        producers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
    for producer in producers:
        if producer.wait() != 0:
            raise RuntimeError("a producer failed")
    return time.monotonic() - began


def http(method: str, url: str) -> Any:
    """The answer's JSON (None when it has no body)."""
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=120) as answer:
        body = answer.read()
        return json.loads(body) if body else None


def retained_bytes(url: str, topics: list[str]) -> int:
    """What the remaining topics still hold (``storageSize`` of their stats): what must stay on disk."""
    total = 0
    for topic in topics:
        try:
            total += int(
                http("GET", f"{url}/admin/v2/persistent/public/default/{topic}/stats")["storageSize"]
            )
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
    return total


def gc_summary(url: str) -> dict[str, Any]:
    details = http("GET", f"{url}/api/v1/bookie/gc_details")[0]
    names = (
        "gcRuns", "deletedLedgers", "sealedActiveEntryLogs", "deletedEntryLogs", "majorCompactionCounter",
        "minorCompactionCounter", "reclaimedByDeletionBytes", "reclaimedByCompactionBytes",
    )  # fmt: skip
    return {name: details[name] for name in names}


def sample_until_settled(
    data_dir: Path, began: float, interval_s: float, settle_s: float, timeout_s: float
) -> list[tuple[float, dict[str, int]]]:
    timeline: list[tuple[float, dict[str, int]]] = []
    smallest, smallest_at = None, began
    while True:
        now = time.monotonic()
        figures = parts(data_dir)
        timeline.append((now - began, figures))
        print(
            f"  +{now - began:6.1f} s  total {mib(figures['total'])} MiB  "
            f"(journal {mib(figures['journal'])}, entry logs {mib(figures['entry_logs'])}, "
            f"index {mib(figures['index'])}, metadata {mib(figures['metadata'])})",
            flush=True,
        )
        if smallest is None or figures["total"] < smallest * 0.98:
            smallest, smallest_at = figures["total"], now
        if now - smallest_at >= settle_s or now - began >= timeout_s:
            return timeline
        time.sleep(interval_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=300)
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--mode", choices=["delete", "retention"], default="delete")
    parser.add_argument("--entries-per-ledger", type=int, default=200)
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=150.0)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the standalone")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    if args.mode == "retention":
        env.setdefault("MAGNETAR_MAX_ENTRIES_PER_LEDGER", str(args.entries_per_ledger))
        env.setdefault("MAGNETAR_MIN_LEDGER_ROLLOVER_TIME_MIN", "0")
    work = Path(tempfile.mkdtemp(prefix="magnetar-disk-return-"))
    data_dir = work / "data"
    topics = [f"disk-return-{i}" for i in range(args.topics)]
    messages = args.megabytes * MIB // 1024 // args.topics
    started = time.monotonic()
    process, url = start_standalone(data_dir, env)
    try:
        print(f"standalone pid {process.pid} at {url}, data in {data_dir}, extra env {env or 'none'}")
        seconds = produce(url, topics, messages)
        count = messages * len(topics)
        print(f"published {args.megabytes} MB ({count} messages of 1 KiB) in {seconds:.1f} s")
        time.sleep(15)  # a checkpoint (every 10 s) has put everything into the entry logs
        before = parts(data_dir)
        print(f"on disk after publishing: {json.dumps({k: mib(v) for k, v in before.items()})} MiB")
        began = time.monotonic()
        print(f"(the standalone started {began - started:.0f} s ago; its GC runs every 60 s from its start)")
        if args.mode == "delete":
            for topic in topics:
                http("DELETE", f"{url}/admin/v2/persistent/public/default/{topic}?force=true")
            print(f"deleted {len(topics)} topics in {time.monotonic() - began:.1f} s; sampling du:")
        else:
            print("retention (0/0, no subscription) trims the closed ledgers at its next check; sampling du:")
        timeline = sample_until_settled(data_dir, began, args.interval_s, args.settle_s, args.timeout_s)
        after = timeline[-1][1]
        floor = min(figures["total"] for _, figures in timeline)
        reached = next(t for t, figures in timeline if figures["total"] <= floor * 1.02)
        summary = {
            "mode": args.mode,
            "published_mb": args.megabytes,
            "topics": args.topics,
            "publish_s": round(seconds, 1),
            "before_mib": {k: round(v / MIB, 1) for k, v in before.items()},
            "after_mib": {k: round(v / MIB, 1) for k, v in after.items()},
            "freed_mib": round((before["total"] - after["total"]) / MIB, 1),
            "seconds_to_floor": round(reached, 1),
            "retained_by_topics_mib": round(retained_bytes(url, topics) / MIB, 1),
            "gc": gc_summary(url),
            "env": env,
        }
        print(json.dumps(summary))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
