"""Magnetar side by side with the alternatives on this machine, measured in the same run.

    .venv/bin/python tests/bench/compare.py                       # everything (about 30 minutes)
    .venv/bin/python tests/bench/compare.py --quick               # a short run CI could afford
    .venv/bin/python tests/bench/compare.py --peers redis-always,magnetar-standalone --sizes 100
    .venv/bin/python tests/bench/compare.py --rounds 3 ...       # medians of 3 rounds (this machine drifts)
    make bench-compare                                            # installs the peers, then the full run

Systems (``--peers``): ``redis-always`` / ``redis-everysec`` (Redis streams, AOF), ``nats`` (JetStream, file
storage), ``rabbitmq`` (streams), ``pulsar-lite`` (Pulsar binary protocol, measured with its own
``pulsar-client``), ``magnetar-standalone`` (one bookie) and ``magnetar-cluster`` (ZooKeeper + 3 bookies
+ 1 broker, E=3 W=3 A=2) over Pulsar's WebSocket API, the same two over Magnetar's binary subprotocol
``magnetar.v1`` (``magnetar-standalone-binary``, ``magnetar-cluster-binary``), and over Pulsar's binary
protocol with the official ``pulsar-client`` driven exactly as for pulsar-lite
(``magnetar-standalone-pulsar``, ``magnetar-cluster-pulsar``: same client, same driver, so those rows and
pulsar-lite's differ by the server only). All on 127.0.0.1, free ports,
data in a temp dir; one system at a time; every process stopped by pid. A system whose server or client is not
installed is reported as not measured.

For each message size: publish throughput (``--messages`` pipelined with ``--window`` in flight, all
acknowledged), consume throughput (reading them back), publish latency at each of ``--rates`` for
``--duration-s`` (open loop), end-to-end latency at ``--e2e-rate``. See ``comparison/engine.py``.
Prints one table per scenario with each figure, the system's durability and the ratios Magnetar / system,
and appends them to tests/bench/RESULTS.md with the command line, versions and machine facts.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: bench.comparison, fixtures

from bench.comparison.engine import BATCH_MAX
from bench.comparison.machine import load_average, machine_facts
from bench.comparison.report import (
    Results,
    Scenario,
    append_section,
    median_results,
    render_systems,
    render_tables,
    rounds_table,
    scenarios,
)
from bench.comparison.runner import MAGNETARS, Runner, Settings, build_system, info

ALL_PEERS = ("redis-always", "redis-everysec", "nats", "rabbitmq", "pulsar-lite", *MAGNETARS)
FULL = {"sizes": "100,1000", "rates": "1000,5000,20000", "duration_s": 10.0, "messages": 100_000,
        "drain_s": 10.0, "phase_limit_s": 60.0}  # fmt: skip
QUICK = {"sizes": "100", "rates": "1000,5000", "duration_s": 2.0, "messages": 5_000,
         "drain_s": 5.0, "phase_limit_s": 20.0}  # fmt: skip
RESULTS_PATH = Path(__file__).resolve().parent / "RESULTS.md"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", default=",".join(ALL_PEERS), help="systems to measure, comma-separated")
    parser.add_argument("--sizes", help=f"payload bytes, comma-separated (default {FULL['sizes']})")
    parser.add_argument("--rates", help=f"fixed publish rates, msgs/s (default {FULL['rates']})")
    parser.add_argument("--e2e-rate", type=float, default=1000.0, help="rate of the end-to-end run")
    parser.add_argument("--duration-s", type=float, help="length of each fixed-rate run (default 10)")
    parser.add_argument("--messages", type=int, help="messages of the throughput runs (default 100000)")
    parser.add_argument("--window", type=int, default=1000, help="unacknowledged messages per producer")
    parser.add_argument("--phase-limit-s", type=float, help="bound of a throughput run (default 60)")
    parser.add_argument("--drain-s", type=float, help="wait for late acks after a fixed-rate run (10)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure everything N times, report each figure's median (3)"
    )
    parser.add_argument("--quick", action="store_true", help="a short run: 100 B, 1k and 5k msgs/s, 2 s")
    parser.add_argument("--results", type=Path, default=RESULTS_PATH, help="Markdown file to append to")
    parser.add_argument("--no-results", action="store_true", help="print the tables, write nothing")
    parser.add_argument("--workdir", type=Path, help="parent of the temp dir (default the system's)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    defaults = QUICK if args.quick else FULL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def settings_of(args: argparse.Namespace) -> Settings:
    return Settings(
        sizes=[int(v) for v in str(args.sizes).split(",")],
        rates=[float(v) for v in str(args.rates).split(",")],
        e2e_rate=args.e2e_rate,
        messages=args.messages,
        duration_s=args.duration_s,
        window=args.window,
        phase_limit_s=args.phase_limit_s,
        drain_s=args.drain_s,
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    settings = settings_of(args)
    names = [name.strip() for name in str(args.peers).split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL_PEERS]
    if unknown:
        print(f"unknown systems {unknown}; known: {', '.join(ALL_PEERS)}", file=sys.stderr)
        return 2
    command = shlex.join([Path(sys.executable).name, "tests/bench/compare.py", *argv])
    systems = [build_system(name, settings.window) for name in names]
    infos = [info(system) for system in systems]
    all_scenarios = scenarios(settings.sizes, settings.rates, settings.e2e_rate)
    began = datetime.datetime.now(datetime.UTC)
    load_before = load_average()
    print(f"{command}\nload average before: {load_before}", flush=True)
    started = time.monotonic()
    rounds: list[Results] = []
    with tempfile.TemporaryDirectory(prefix="magnetar-compare-", dir=args.workdir) as scratch:
        facts = machine_facts(Path(scratch))
        for index in range(args.rounds):
            if args.rounds > 1:
                print(f"=== round {index + 1} of {args.rounds}", flush=True)
            rounds.append(Results(infos))
            runner = Runner(settings, all_scenarios, rounds[-1], Path(scratch) / f"round-{index + 1}")
            # Every other round in reverse order: a slow spell of the machine falls on different systems.
            for system in systems if index % 2 == 0 else systems[::-1]:
                runner.run_system(system)
    elapsed = time.monotonic() - started
    load_after = load_average()
    text = render(
        command, began, elapsed, settings, facts, load_before, load_after, runner, rounds, all_scenarios
    )
    print("\n" + text, flush=True)
    if not args.no_results:
        append_section(args.results, text)
        print(f"appended to {args.results}", flush=True)
    return 0


def render(
    command: str,
    began: datetime.datetime,
    elapsed_s: float,
    settings: Settings,
    facts: dict[str, str],
    load_before: str,
    load_after: str,
    runner: Runner,
    rounds: list[Results],
    all_scenarios: list[Scenario],
) -> str:
    results = median_results(rounds)
    versions = [
        f"* {name}: " + "; ".join(f"{k} {v}" for k, v in system_versions.items())
        for name, system_versions in runner.versions.items()
    ]
    lines = [
        f"## compare: Magnetar and its alternatives side by side ({began:%Y-%m-%d %H:%M} UTC)",
        "",
        f"Command: `{command}` ({elapsed_s / 60:.1f} min).",
        "",
        f"Machine: {facts['cpu']}; {facts['memory']} memory; {facts['os']}; Python {facts['python']}; "
        f"data on {facts['disk']}.",
        f"Load average before: {load_before}; after: {load_after}. Other work shares this machine: the "
        "figures are noisy, and only figures of the same run compare.",
        "",
        f"Settings: one producer connection with {settings.window:,} messages in flight at most (handed to "
        f"the client {BATCH_MAX} at a time), one consumer; throughput runs of {settings.messages:,} messages "
        f"(bounded by {settings.phase_limit_s:.0f} s); fixed-rate runs of {settings.duration_s:g} s each "
        f"(open loop, latency from each message's due time to its ack); end-to-end at "
        f"{settings.e2e_rate:,.0f} msgs/s (due time -> delivery to the subscribed consumer). One system "
        "runs at a time."
        + (
            f" Everything was measured in {len(rounds)} rounds (every other one in reverse order of the "
            "systems, each system started afresh); each table shows the median round's figure, and the last "
            "table every round's."
            if len(rounds) > 1
            else ""
        ),
        "",
        "Versions:",
        *versions,
        "",
        render_systems(results, runner.how),
        "",
        "pulsar-lite and the `-pulsar` rows (Magnetar's binary port) are measured with the same client, "
        "Apache's `pulsar-client`, driven the same way (comparison/pulsar_client.py): between them only the "
        "server differs; against the other Magnetar rows the client stack differs too. Over Pulsar's "
        "WebSocket API Magnetar's payloads travel base64-encoded in JSON frames, one message per frame; the "
        "`-binary` rows use Magnetar's subprotocol `magnetar.v1` (raw payloads, many per frame).",
        "",
        "Ratios are Magnetar ÷ the row's system: for throughput above 1 means Magnetar is faster, for "
        "latency above 1 means Magnetar is slower. 'saturated' marks a fixed-rate run that did not "
        "acknowledge the target rate; its latencies then include the backlog. 'send lag p99' is how late "
        "the harness handed messages to the client (its own scheduling, or a full window): when it is "
        "close to the latency, the client side set the pace. Consumers count distinct messages by the "
        "sequence number each carries; redelivered and skipped ones are reported apart.",
        "",
        render_tables(results, all_scenarios),
    ]
    if len(rounds) > 1:
        lines += [
            "#### Every round (msgs/s, or p99 ms)",
            "",
            "'N% stolen': the share of the machine's CPU time the hypervisor gave other guests during that "
            "phase (`/proc/stat` steal), shown from 1 % on; every process of the phase ran slower by about "
            "that much.",
            "",
            rounds_table(rounds, all_scenarios),
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
