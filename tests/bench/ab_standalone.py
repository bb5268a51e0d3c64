"""Publish and consume throughput of two builds, interleaved in one sitting: ``magnetar perf produce`` and
``magnetar perf consume`` (JSON and binary) against a fresh ``magnetar standalone`` of each build in turn,
with the standalone's CPU time per message (``/proc/<pid>/stat``), less sensitive to other load than rates.

    .venv/bin/python tests/bench/ab_standalone.py --old-pythonpath /tmp/old-pkg [--pairs 3]

``--old-pythonpath`` puts the other build first on ``PYTHONPATH`` (a directory holding ``magnetar/`` with
``admin``, ``bookkeeper``, ``broker``, ``gc``, ``managed_ledger`` linked to the other checkout's folders);
the build of this checkout is "new". Each pair runs old then new (every other pair new then old). Every
process started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.processes import MagnetarProcess

PHASES = [
    (
        "produce json",
        ["perf", "produce", "--protocol", "json", "--messages", "300000", "--size", "100"],
        "json",
    ),
    (
        "produce binary",
        ["perf", "produce", "--protocol", "binary", "--messages", "600000", "--size", "100"],
        "bin",
    ),
    (
        "consume json",
        ["perf", "consume", "--protocol", "json", "--messages", "300000", "--initial-position", "Earliest"],
        "json",
    ),
    (
        "consume binary",
        ["perf", "consume", "--protocol", "binary", "--messages", "600000", "--initial-position", "Earliest"],
        "bin",
    ),
]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_build(name: str, pythonpath: str | None, tmp: Path) -> dict[str, tuple[float, float]]:
    env = {"PYTHONPATH": pythonpath} if pythonpath else {"PYTHONPATH": ""}
    process = MagnetarProcess(
        name,
        ["standalone", "--data-dir", str(tmp / name), "--http-port", "0", "--bookie-port", str(free_port())],
        tmp,
        env,
    )
    process.start(timeout_s=60)
    figures: dict[str, tuple[float, float]] = {}
    try:
        url = f"ws://127.0.0.1:{process.ready['port']}"
        for phase, args, topic in PHASES:
            before = cpu_s(process.pid)
            command = [
                sys.executable,
                "-m",
                "magnetar.admin.cli",
                *args,
                "--url",
                url,
                "--topic",
                f"ab-{topic}",
            ]
            command += ["--report-interval-s", "1000"]
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=600, check=True, env={**os.environ, **env}
            )
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            messages = summary["messages"]
            used = cpu_s(process.pid) - before
            figures[phase] = (summary["rate_msg_s"], used / messages * 1e6)
            if summary.get("errors"):
                print(f"{name} {phase}: {summary['errors']} errors", flush=True)
    finally:
        process.stop()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old-pythonpath", required=True)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, dict[str, list[tuple[float, float]]]] = {"old": {}, "new": {}}
    with tempfile.TemporaryDirectory(prefix="ab-") as tmp:
        for pair in range(args.pairs):
            order = [("old", args.old_pythonpath), ("new", None)]
            if pair % 2:
                order.reverse()
            for build, path in order:
                figures = run_build(f"{build}-{pair}", path, Path(tmp))
                for phase, figure in figures.items():
                    results[build].setdefault(phase, []).append(figure)
                print(build, pair, {k: (round(v[0]), round(v[1], 2)) for k, v in figures.items()}, flush=True)
    print("| phase | old: msgs/s per run, us/msg (mean) | new: msgs/s per run, us/msg (mean) |")
    print("|---|---|---|")
    for phase, _, _ in PHASES:
        cells = []
        for build in ("old", "new"):
            runs = results[build][phase]
            rates = " / ".join(f"{rate / 1000:.1f}k" for rate, _ in runs)
            cpu = sum(us for _, us in runs) / len(runs)
            mean = sum(rate for rate, _ in runs) / len(runs)
            cells.append(f"{rates} (mean {mean / 1000:.1f}k), {cpu:.2f}")
        print(f"| {phase} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
