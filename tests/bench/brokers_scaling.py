"""Aggregate publish throughput of a dev cluster with 1, 2 and 3 brokers (the scale-out figure).

For each broker count N: ``magnetar dev-cluster --zk 1 --bookies 3 --brokers N`` (disk bookies, E/W/A
3/3/2), a namespace ``public/scale`` of ``--bundles`` bundles, then ``magnetar perf produce --topics T
--lookup`` through broker-0: every producer looks its topic up (the leader places the bundles on the least
loaded brokers) and publishes to the owner directly, as a Pulsar client does. A short warm-up run places the
bundles first; the measured run follows. Printed per N: msgs/s of every run and the topics each broker owns
(from the lookups); every process is stopped (the dev cluster by its pid, its components by theirs).

    .venv/bin/python tests/bench/brokers_scaling.py --brokers 1,2,3 --protocol binary --duration-s 15

On this 2-core machine every broker, bookie and the load generator share two cores, so the figure shows
what a second broker costs or gains when CPU is the limit, not what separate machines would give.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.comparison.processes import ServerProcess, kill_leftovers

READY_TIMEOUT_S = 180.0
NAMESPACE = "public/scale"


def _magnetar(*args: str) -> list[str]:
    return [sys.executable, "-m", "magnetar.admin.cli", "--log-level", "WARNING", *args]


def _http(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def _perf(http_url: str, args: argparse.Namespace, duration_s: float) -> dict[str, Any]:
    command = _magnetar(
        "perf", "produce", "--url", http_url, "--topic", f"persistent://{NAMESPACE}/t",
        "--topics", str(args.topics), "--producers", "1", "--lookup", "--protocol", args.protocol,
        "--size", str(args.size), "--duration-s", str(duration_s), "--report-interval-s", "5",
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=duration_s + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"perf produce failed ({done.returncode}): {done.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def _owners(http_url: str, topics: int) -> Counter[str]:
    owners: Counter[str] = Counter()
    for index in range(topics):
        answer = _http("GET", f"{http_url}/lookup/v2/topic/persistent/{NAMESPACE}/t-{index}")
        owners[str(answer["httpUrl"])] += 1
    return owners


def run_one(brokers: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    process = ServerProcess(
        f"dev-cluster-{brokers}",
        _magnetar(
            "dev-cluster", "--zk", "1", "--bookies", "3", "--brokers", str(brokers),
            "--data-dir", str(workdir / f"dev-cluster-{brokers}"), "--ensemble-size", "3",
            "--write-quorum", "3", "--ack-quorum", "2", "--bookie-storage", "disk",
        ),
        workdir / f"dev-cluster-{brokers}.log",
        ready_line=True,
    )  # fmt: skip
    components: list[int] = []
    process.start()
    try:
        ready = process.read_ready_line(READY_TIMEOUT_S)
        kinds = ("zookeepers", "bookies", "brokers")
        components = [int(component["pid"]) for kind in kinds for component in ready.get(kind, [])]
        http_url = str(ready["brokers"][0]["wsUrl"]).replace("ws://", "http://").rstrip("/")
        _http("PUT", f"{http_url}/admin/v2/namespaces/{NAMESPACE}", {"bundles": {"numBundles": args.bundles}})
        _perf(http_url, args, args.warmup_s)
        runs = [_perf(http_url, args, args.duration_s) for _ in range(args.rounds)]
        owners = _owners(http_url, args.topics)
    finally:
        process.stop()
        kill_leftovers(process.name, components)
    rates = [float(run["rate_msg_s"]) for run in runs]
    return {"brokers": brokers, "rates": rates, "owners": sorted(owners.values(), reverse=True), "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="1,2,3", help="broker counts to measure, in order")
    parser.add_argument("--topics", type=int, default=48)
    parser.add_argument("--bundles", type=int, default=16)
    parser.add_argument("--protocol", choices=["json", "binary"], default="binary")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--duration-s", type=float, default=15.0)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="magnetar-scaling-") as tmp:
        for brokers in (int(part) for part in args.brokers.split(",")):
            started = time.strftime("%H:%M:%S", time.gmtime())
            result = run_one(brokers, args, Path(tmp))
            results.append(result)
            rates = " / ".join(f"{rate:,.0f}" for rate in result["rates"])
            owners = result["owners"]
            print(f"{started} UTC  brokers={brokers}  msgs/s: {rates}  topics per broker: {owners}")
    print(json.dumps([{key: value for key, value in r.items() if key != "runs"} for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
