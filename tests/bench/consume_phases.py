"""Where a consumer's CPU goes in ``magnetar standalone``: CPU per message of ``magnetar perf consume`` and
its split by phase, from ``py-spy`` samples of the standalone (``pip install py-spy``; not a dependency).

    .venv/bin/python tests/bench/consume_phases.py [--pythonpath DIR] [--protocol json] [--messages 300000]

Starts a fresh standalone (``--pythonpath``: another build first on ``PYTHONPATH``, a directory holding
``magnetar/{admin,bookkeeper,broker,gc,managed_ledger}`` links, as ``ab_standalone.py`` takes), publishes
``--messages`` 100-byte messages with ``magnetar perf produce``, then samples the standalone with ``py-spy
record --nonblocking`` while ``magnetar perf consume`` reads them back from the earliest position. Prints the
CPU per message (``/proc/<pid>/stat``, the whole process: broker and in-process bookie) and each phase's
share of the samples times that figure. A sample goes to the first phase, in the order of :data:`PHASES`,
one of whose names is on its stack (so a render under the dispatcher counts as render). Samples in trio's
``epoll_wait`` are counted (py-spy cannot always tell an idle wait from a busy poll): "trio/runtime" is an
upper bound. Every process started here is stopped by pid.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ab_standalone import process_cpu_ns
from bench.comparison.processes import free_port
from fixtures.processes import MagnetarProcess

PHASES = [
    ("render (JSON, base64, id)", ["JsonFrames.deliver", "consumer_message_frame", "delivered_message_id",
                                   "_json_frame", "BinaryFrames.deliver", "message_record", "deliver_each"]),
    ("entry decode", ["decode_entry", "deliveries_of"]),
    ("ack: subscription and cursor", ["Subscription.ack", "Subscription._ack", "Subscriber.ack",
                                      "take_pending", "ack_range"]),
    ("ack: frame parse, adapter", ["on_frame", "plain_ack", "parse_consumer_command", "_consumer_command",
                                   "take_group", "JsonConsumerCommands", "BinaryConsumerCommands"]),
    ("WebSocket read, frame decode", ["WebSocket._reader", "FrameDecoder", "receive_batch"]),
    ("WebSocket write, socket send", ["OutboundFrames.run", "send_many", "WebSocket._writer"]),
    ("managed-ledger read", ["read_entries", "managed_ledger/", "bookkeeper/client", "bookkeeper/bookie",
                             "bookkeeper/protocol"]),
    ("dispatch, consumer bookkeeping", ["Dispatcher.", "Subscription.push", "Consumer.push"]),
    ("session read loop", ["._serve"]),
    ("trio/runtime (upper bound)", ["trio/"]),
]  # fmt: skip


def _py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else "py-spy"


def phase_of(stack: str) -> str:
    for name, markers in PHASES:
        if any(marker in stack for marker in markers):
            return name
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pythonpath", default="")
    parser.add_argument("--protocol", choices=["json", "binary"], default="json")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rate-hz", type=int, default=400, help="py-spy samples per second")
    parser.add_argument("--raw-out", default="", help="keep py-spy's collapsed stacks in this file")
    args = parser.parse_args()
    env = {"PYTHONPATH": args.pythonpath}
    with tempfile.TemporaryDirectory(prefix="phases-") as tmp:
        data = Path(tmp)
        process = MagnetarProcess(
            "standalone",
            [
                "standalone",
                "--data-dir",
                str(data / "sa"),
                "--http-port",
                "0",
                "--bookie-port",
                str(free_port()),
            ],
            data,
            env,
        )
        process.start(timeout_s=60)
        try:
            url = f"ws://127.0.0.1:{process.ready['port']}"
            common = [
                "--url",
                url,
                "--topic",
                "phases",
                "--protocol",
                args.protocol,
                "--report-interval-s",
                "1000",
            ]
            cli = [sys.executable, "-m", "magnetar.admin.cli", "perf"]
            run_env = {**os.environ, **env}
            subprocess.run([*cli, "produce", *common, "--messages", str(args.messages), "--size", "100"],
                           capture_output=True, check=True, env=run_env, timeout=900)  # fmt: skip
            raw = data / "consume.raw"
            spy = subprocess.Popen(
                [_py_spy(), "record", "--nonblocking", "-r", str(args.rate_hz), "-p", str(process.pid), "-f",
                 "raw", "-o", str(raw)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                before = process_cpu_ns(process.pid) / 1e9
                consume = [*cli, "consume", *common, "--messages", str(args.messages)]
                done = subprocess.run(
                    [*consume, "--initial-position", "Earliest"],
                    capture_output=True, text=True, check=True, env=run_env, timeout=900,
                )  # fmt: skip
                used_us = (process_cpu_ns(process.pid) / 1e9 - before) / args.messages * 1e6
            finally:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
        finally:
            process.stop()
        rate = json.loads(done.stdout.strip().splitlines()[-1])["rate_msg_s"]
        counts: collections.Counter[str] = collections.Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            counts[phase_of(stack)] += int(count)
        if args.raw_out:
            Path(args.raw_out).write_text(raw.read_text())
    total = sum(counts.values())
    print(
        f"consume {args.protocol}: {rate:,.0f} msgs/s, standalone CPU {used_us:.2f} us/msg, {total} samples"
    )
    print("| phase | share | us/msg |")
    print("|---|---|---|")
    for name, _ in [*PHASES, ("other", [])]:
        share = counts[name] / total if total else 0.0
        print(f"| {name} | {share:.1%} | {share * used_us:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
