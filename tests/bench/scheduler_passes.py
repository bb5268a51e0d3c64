"""Scheduler passes per message: how many turns of trio's event loop a publish takes in ``magnetar
standalone``, and which tasks run for it - a figure load hardly moves, unlike latency, so it can be compared
on a busy machine.

    .venv/bin/python tests/bench/scheduler_passes.py [--python .bench/ab/<commit>/.venv/bin/python]
        [--protocol binary] [--rate 200] [--duration-s 5]

Starts a standalone (with ``--python``: another build's interpreter, e.g. a ``make bench-ab`` venv) whose
``trio.run`` carries an instrument counting the loop's passes (one ``epoll_wait`` and the task steps after it)
and each task's steps, publishes ``--rate`` messages a second with ``magnetar perf produce`` (of the same
build) for ``--duration-s``, and prints passes and task steps per acknowledged message. At a low rate each
message goes through alone, so passes per message is the number of hops between the message's arrival and its
receipt, plus the loop's background turns (timers) shared out. Every process started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
READY_TIMEOUT_S = 60.0


def serve(stats_path: str, argv: list[str]) -> int:
    """The standalone, in this process, with the counting instrument (``--serve``)."""
    import trio

    class Counter(trio.abc.Instrument):
        def __init__(self) -> None:
            self.passes = 0
            self.steps: collections.Counter[str] = collections.Counter()

        def after_io_wait(self, timeout: float) -> None:
            self.passes += 1

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            self.steps[".".join(task.name.split(".")[-2:])] += 1

    counter = Counter()

    def reset(signum: int, frame: object) -> None:
        counter.passes = 0
        counter.steps.clear()

    def dump(signum: int, frame: object) -> None:
        Path(stats_path).write_text(json.dumps({"passes": counter.passes, "steps": dict(counter.steps)}))

    signal.signal(signal.SIGUSR1, reset)
    signal.signal(signal.SIGUSR2, dump)
    plain_run = trio.run

    def run(*args: Any, **kwargs: Any) -> Any:
        kwargs["instruments"] = [*kwargs.get("instruments", ()), counter]
        return plain_run(*args, **kwargs)

    trio.run = run
    from magnetar.admin.cli.main import main

    sys.argv = ["magnetar", *argv]
    return main()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def measure(args: argparse.Namespace) -> int:
    python = args.python or sys.executable
    with tempfile.TemporaryDirectory(prefix="passes-") as tmp:
        stats = Path(tmp) / "stats.json"
        out = Path(tmp) / "standalone.out"
        command = [
            python, str(HERE), "--serve", str(stats), "standalone", "--data-dir", str(Path(tmp) / "data"),
            "--http-port", "0", "--bookie-port", str(free_port()),
        ]  # fmt: skip
        with out.open("w") as sink:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            ready: dict[str, Any] | None = None
            while ready is None:
                if process.poll() is not None or time.monotonic() > deadline:
                    print(f"the standalone did not start ({python})", file=sys.stderr)
                    return 1
                for line in out.read_text().splitlines():
                    if '"standalone-ready"' in line:
                        ready = json.loads(line)
                time.sleep(0.2)
            url = f"ws://127.0.0.1:{ready['port']}"
            perf = [
                python,
                "-m",
                "magnetar.admin.cli",
                "perf",
                "produce",
                "--url",
                url,
                "--protocol",
                args.protocol,
            ]
            subprocess.run([*perf, "--topic", "warm", "--messages", "10"], capture_output=True, check=True)
            process.send_signal(signal.SIGUSR1)
            done = subprocess.run(
                [*perf, "--topic", "passes", "--rate", str(args.rate), "--duration-s", str(args.duration_s),
                 "--report-interval-s", "1000"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            process.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 10
            while not stats.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        counted = json.loads(stats.read_text())
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    messages = int(summary["messages"])
    print(
        f"{args.protocol} at {args.rate}/s, {messages} messages: {counted['passes'] / messages:.2f} passes "
        f"per message; latency ms p50 {summary['latency_ms']['p50']} p99 {summary['latency_ms']['p99']}"
    )
    steps = sorted(counted["steps"].items(), key=lambda item: -item[1])
    for name, count in steps:
        if count / messages >= 0.05:
            print(f"  {name:<45} {count / messages:5.2f} steps per message")
    return 0


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        return serve(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--python", help="the interpreter of the build to measure (default: this one)")
    parser.add_argument("--protocol", choices=("json", "binary"), default="binary")
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--duration-s", type=int, default=5)
    args = parser.parse_args()
    if not 1 <= args.rate <= 100_000 or not 1 <= args.duration_s <= 600:
        parser.error("--rate takes 1..100000, --duration-s 1..600")
    os.environ.setdefault("MAGNETAR_BROKER_SERVICE_PORT", "0")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
