"""The data path's guard: an interleaved A/B of the standalone's cost per message, per phase (produce JSON,
produce binary, consume JSON, consume binary; on request produce pulsar, the official client without
batching: the cost per entry), of two builds, with an A/A control beside it.

    make bench-ab OLD=288a165 [NEW=<rev>] [PAIRS=12]
    .venv/bin/python tests/bench/ab_standalone.py --old 288a165 [--new REV] [--pairs 12] [--markdown]

Builds. ``--old REV`` (and ``--new REV``; without it, the working tree with its ``.venv``) is checked out
with ``git worktree add --detach`` under ``.bench/ab/<commit>/`` and installed, with the runtime
dependencies of that revision's ``pyproject.toml``, into its own venv there (pip's cache serves the
wheels); a later run for the same commit reuses the directory. ``--old-pythonpath DIR`` instead runs the
old build with this venv's interpreter and ``DIR`` (a folder holding ``magnetar/`` with ``admin``,
``bookkeeper``, ``broker``, ``gc``, ``managed_ledger`` linked to another checkout) first on ``PYTHONPATH``.
Each build runs its own ``magnetar standalone`` and its own ``magnetar perf produce/consume``.

What is measured. Each round starts a fresh standalone of each side, then runs every phase on one side and
right after on the other (the order turns at every phase and every other round), so the two runs of a pair
are seconds apart. The figure is the standalone's cost per message during the phase: instructions per
message from the hardware counters where ``perf stat -e instructions`` works (checked at start), else its
CPU time per message (the kernel's CPU clock of the whole process, ``clock_gettime`` on the process's CPU
clock id, all threads, nanoseconds), which a busy machine moves far more. Rounds alternate between A/B pairs
(old against new) and A/A pairs (the same build twice, old and new in turn, in the same order pattern), so
``--pairs N`` takes 2N rounds.

What it says. Per phase: the old and new medians, the change (the median of the pairs' new / old ratios),
the A/A change, the smallest effect this run can detect (from the A/A pairs' spread and the number of A/B
pairs: ``tests/bench/ab_stats.py``) and a verdict: worse / better (beyond the detectable effect), no worse
(any regression is below ``--tolerance``, 3 %), or inside the noise (the run cannot rule out a regression of
that size: take more pairs, or a quieter machine). With the exact command, the date (UTC) and ``uptime`` at
start and end, as a RESULTS.md entry with ``--markdown``. Progress goes to stderr; the raw figures of every
run to ``.bench/ab/last-run.json`` (``--report FILE`` prints a saved run again). Every process started here
is stopped by its pid, on Ctrl-C too.

Latency. ``--latency RATE`` measures instead the publish latency's 99th percentile, ms, at a fixed rate
(``magnetar perf produce --rate RATE``, ``--latency-s`` seconds per phase, 100-byte messages, from each
send to its receipt as the client sees it), JSON and binary, in the same interleaved pairs with the same A/A
control: scheduling and group commit set it, not CPU alone, and this machine moves it far more.

Noise. CPU time per message follows the rate: a client slowed by other load hands the standalone smaller
batches. On the project's shared 2-core VM at load average 3-4, the A/A pairs spread by about ±5-7 % per pair
in three phases and ±11 % in produce binary, so 16 pairs detect 3-5 % there but not produce binary's 3 %
(tests/bench/RESULTS.md); the report says how many pairs the tolerance would take. The working tree is
measured as it is while the run lasts: do not edit it meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ab_report import Measure, Report, measure_fields, report_from_saved
from bench.comparison.processes import free_port
from fixtures.processes import MagnetarProcess, ProcessFailedError

REPO = Path(__file__).resolve().parents[2]
SCRATCH = REPO / ".bench" / "ab"
LAST_RUN = SCRATCH / "last-run.json"
PACKAGE_DIRS = ("admin", "bookkeeper", "broker", "gc", "managed_ledger", "pyproject.toml")
PHASE_TIMEOUT_S = 600.0
STANDALONE_START_S = 90.0
PERF_ATTACH_S = 0.3
"""``perf stat -p`` needs a moment to open its counters on every thread before the phase starts."""


@dataclass(frozen=True)
class Phase:
    name: str
    verb: str  # produce / consume
    protocol: str  # json / binary / pulsar
    extra: tuple[str, ...]
    p99: bool = False
    """The figure is the run's publish latency p99 (ms), not the meter's cost per message."""


def latency_phases(rate: int, seconds: int) -> tuple[Phase, ...]:
    paced = ("--size", "100", "--rate", str(rate))
    return (
        Phase(f"p99 json at {rate:,}/s", "produce", "json", paced, p99=True),
        Phase(f"p99 binary at {rate:,}/s", "produce", "binary", paced, p99=True),
    )


class LatencyMeter:
    """No meter: a latency phase's figure comes from the client's summary."""

    def __init__(self, rate: int) -> None:
        self.measure = Measure(
            quantity="publish latency p99",
            unit="ms",
            description=(
                f"the publish latency's 99th percentile at {rate:,} msgs/s, ms, from each send to its "
                "receipt as `magnetar perf produce --rate` sees it (100-byte messages)"
            ),
            digits=2,
            per="",
        )

    def begin(self, pid: int) -> int:
        return pid

    def end(self, token: int) -> float:
        return 0.0

    def close(self) -> None:
        pass


PHASES = (
    Phase("produce json", "produce", "json", ("--size", "100")),
    Phase("produce binary", "produce", "binary", ("--size", "100")),
    Phase("consume json", "consume", "json", ("--initial-position", "Earliest")),
    Phase("consume binary", "consume", "binary", ("--initial-position", "Earliest")),
    # The official client without batching: every message an entry of its own, so this phase measures the
    # write path's cost per entry (codec, managed ledger, replication client, bookie, journal).
    Phase("produce pulsar", "produce", "pulsar", ("--size", "100", "--disable-batching")),
)


class AbError(RuntimeError):
    """A build that cannot be checked out, installed or run: the message names the revision and directory."""


# ---------------------------------------------------------------------------------------------------- builds


@dataclass(frozen=True)
class Build:
    label: str  # old / new
    name: str  # what the report's title calls it: "`288a165`", "the working tree at `fb633f6`"
    detail: str  # and its text: "`288a165`: owner proxy: ..."
    python: Path
    env: dict[str, str]
    where: Path
    rev: str = ""  # as given: "288a165"; empty for the working tree or a PYTHONPATH build

    def magnetar(self) -> list[str]:
        return [str(self.python), "-m", "magnetar.admin.cli"]

    def who(self) -> str:
        """The build, as an error message names it: ``OLD=288a165 (.bench/ab/288a165f7186)``."""
        given = f"{self.label.upper()}={self.rev}" if self.rev else self.label
        return f"{given} ({self.where})"


def git(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def resolve_commit(label: str, rev: str) -> str:
    done = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise AbError(f"{label.upper()}={rev}: not a commit of the repository at {REPO}")
    return done.stdout.strip()


def subject(commit: str) -> str:
    return git("log", "-1", "--format=%s", commit).stdout.strip()


def checked_out(label: str, rev: str, commit: str, directory: Path, progress: Callable[[str], None]) -> None:
    """A detached worktree of ``commit`` at ``directory``: the existing one, or a new one."""
    if directory.exists():
        head = git("rev-parse", "HEAD", cwd=directory)
        if head.returncode != 0 or head.stdout.strip() != commit:
            raise AbError(
                f"{label.upper()}={rev}: {directory} exists but is not a checkout of {commit[:12]} "
                f"(HEAD: {head.stdout.strip() or head.stderr.strip()}); remove it with "
                f"`git worktree remove --force {directory}` and run again"
            )
        return
    progress(f"{label} {rev}: git worktree add --detach {directory} {commit[:12]}")
    directory.parent.mkdir(parents=True, exist_ok=True)
    # -f: a directory removed by hand leaves a registration behind, which would refuse the path
    done = git("worktree", "add", "-f", "--detach", str(directory), commit)
    if done.returncode != 0:
        raise AbError(
            f"{label.upper()}={rev}: cannot check out {commit[:12]} at {directory}: {done.stderr.strip()}"
        )


def installed(label: str, rev: str, commit: str, directory: Path, progress: Callable[[str], None]) -> Path:
    """The venv of a checkout, made from its own pyproject.toml (runtime dependencies only) unless a previous
    run finished making it."""
    venv = directory / ".venv"
    python = venv / "bin" / "python"
    stamp = venv / ".ab-installed"
    if stamp.is_file() and stamp.read_text().strip() == commit and python.exists():
        progress(f"{label} {rev}: reusing {venv}")
        return python
    log = directory / "ab-install.log"
    progress(f"{label} {rev}: installing into {venv} (log: {log})")
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(directory)],
    ]
    with log.open("w") as out:
        for step in steps:
            out.write(f"$ {shlex.join(step)}\n")
            out.flush()
            done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False, cwd=directory)
            if done.returncode != 0:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise AbError(
                    f"{label.upper()}={rev}: cannot build {commit[:12]} in {directory} "
                    f"(`{shlex.join(step)}` exited {done.returncode}; {log}):\n{tail}"
                )
    check = subprocess.run(
        [str(python), "-c", "import magnetar.admin.cli"], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        raise AbError(
            f"{label.upper()}={rev}: {venv} cannot import magnetar.admin.cli: {check.stderr.strip()[-500:]}"
        )
    stamp.write_text(commit + "\n")
    return python


def revision_build(label: str, rev: str, progress: Callable[[str], None]) -> Build:
    commit = resolve_commit(label, rev)
    directory = SCRATCH / commit[:12]
    checked_out(label, rev, commit, directory, progress)
    python = installed(label, rev, commit, directory, progress)
    name = f"`{rev}`" if commit.startswith(rev) else f"`{rev}` ({commit[:7]})"
    detail = f"{name} ({subject(commit)}), built in `{directory.relative_to(REPO)}`"
    return Build(label, name, detail, python, {"PYTHONPATH": ""}, directory, rev)


def working_tree_build(progress: Callable[[str], None]) -> Build:
    python = REPO / ".venv" / "bin" / "python"
    if not python.exists():
        raise AbError(f"NEW (the working tree {REPO}): no {python}; run `make venv` first")
    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    dirty = git("status", "--porcelain", "--", *PACKAGE_DIRS).stdout.strip()
    name = f"the working tree at `{head}`" + (" with uncommitted changes" if dirty else "")
    progress(f"new: {name} ({python})")
    return Build("new", name, f"{name}, its `.venv`", python, {"PYTHONPATH": ""}, REPO)


def pythonpath_build(directory: str) -> Build:
    path = Path(directory)
    if not (path / "magnetar").is_dir():
        raise AbError(f"--old-pythonpath {directory}: no magnetar/ folder in it")
    checkout = (path / "magnetar" / "broker").resolve().parent
    detail = f"`{checkout}` on PYTHONPATH (`{directory}`), with the new build's venv"
    return Build("old", f"`{checkout.name}`", detail, Path(sys.executable), {"PYTHONPATH": directory}, path)


# ---------------------------------------------------------------------------------------------------- meters


class Meter(Protocol):
    measure: Measure

    def begin(self, pid: int) -> Any: ...

    def end(self, token: Any) -> float: ...

    def close(self) -> None: ...


def process_cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid``, dead ones included: the process's CPU clock (Linux encodes
    ``clock_getcpuclockid(pid)`` as ``(~pid << 3) | 2``), else utime + stime from ``/proc/<pid>/stat``."""
    try:
        return time.clock_gettime_ns((~pid << 3) | 2)
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


class CpuMeter:
    measure = Measure(
        quantity="CPU time",
        unit="µs",
        description=(
            "the standalone's CPU time per message, µs (the process's CPU clock: every thread, user + "
            "system), since `perf stat -e instructions` counts nothing on this machine"
        ),
        digits=2,
    )

    def begin(self, pid: int) -> tuple[int, int]:
        return pid, process_cpu_ns(pid)

    def end(self, token: tuple[int, int]) -> float:
        pid, before = token
        return (process_cpu_ns(pid) - before) / 1000

    def close(self) -> None:
        pass


def parse_perf_csv(text: str) -> int | None:
    """The count of the first event in ``perf stat -x,`` output; None when it was not counted or supported."""
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        value = line.split(",", 1)[0].strip()
        return int(value) if value.isdigit() else None
    return None


def counter_event() -> str | None:
    """The instructions event ``perf stat`` can count for this user here, or None (no perf, no counters: a
    VM that does not expose the PMU, or ``perf_event_paranoid`` too high)."""
    for event in ("instructions", "instructions:u"):
        try:
            done = subprocess.run(
                ["perf", "stat", "-x,", "-e", event, "--", "true"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode == 0 and parse_perf_csv(done.stderr):
            return event
    return None


class InstructionsMeter:
    def __init__(self, event: str, scratch: Path) -> None:
        self.event = event
        self.scratch = scratch
        self.measure = Measure(
            quantity="instructions",
            unit="instructions",
            description=(
                f"instructions per message retired by the standalone (`perf stat -e {event} -p <pid>`, every "
                "thread), which other load on the machine moves far less than CPU time"
            ),
            digits=0,
        )
        self.running: list[subprocess.Popen[bytes]] = []

    def begin(self, pid: int) -> tuple[subprocess.Popen[bytes], Path]:
        output = self.scratch / f"perf-{pid}-{time.monotonic_ns()}.csv"
        command = ["perf", "stat", "-x,", "-e", self.event, "-p", str(pid), "-o", str(output)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.running.append(process)
        time.sleep(PERF_ATTACH_S)
        return process, output

    def end(self, token: tuple[subprocess.Popen[bytes], Path]) -> float:
        process, output = token
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        self.running.remove(process)
        count = parse_perf_csv(output.read_text()) if output.exists() else None
        if count is None:
            raise AbError(f"perf stat counted nothing ({output})")
        return float(count)

    def close(self) -> None:
        for process in self.running:
            stop_pid(process)
        self.running.clear()


def stop_pid(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# ---------------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class Round:
    """One round: two standalones, ``first`` and ``second`` (Builds), and which of them stands in the old
    build's place when the pair's ratio is taken."""

    index: int
    kind: str  # "A/B" or "A/A"
    first: Build
    second: Build
    old_slot: int  # 0: first, 1: second

    def title(self) -> str:
        names = (self.first.label, self.second.label)
        return f"{self.kind} {names[0]}-{names[1]}" if self.kind == "A/B" else f"A/A {names[0]}-{names[1]}"


def schedule(old: Build, new: Build, pairs: int) -> list[Round]:
    """A/B and A/A rounds in turn. Every kind runs both orders equally often (old first, then new first),
    and the A/A control runs old against old and new against new equally often."""
    rounds: list[Round] = []
    for index in range(2 * pairs):
        step = index // 2
        turned = step % 2 == 1
        if index % 2 == 0:
            first, second = (new, old) if turned else (old, new)
            rounds.append(Round(index, "A/B", first, second, 1 if turned else 0))
        else:
            same = new if (step // 2) % 2 == 1 else old
            rounds.append(Round(index, "A/A", same, same, 1 if turned else 0))
    return rounds


class Standalone:
    def __init__(self, build: Build, name: str, tmp: Path) -> None:
        self.build = build
        self.name = name
        data = tmp / name
        data.mkdir()
        self.process = MagnetarProcess(
            name,
            ["standalone", "--data-dir", str(data), "--http-port", "0", "--bookie-port", str(free_port())],
            tmp,
            # Pulsar's binary port on a free port: two standalones run side by side (a build without the
            # binary protocol ignores the variable, with a warning).
            {**build.env, "MAGNETAR_BROKER_SERVICE_PORT": "0"},
            program=build.magnetar(),
        )

    def start(self) -> None:
        try:
            self.process.start(timeout_s=STANDALONE_START_S)
        except ProcessFailedError as exc:
            raise AbError(f"{self.build.who()}: the standalone did not start: {exc}") from exc

    def url(self, protocol: str) -> str:
        if protocol == "pulsar":
            broker_url = self.process.ready.get("brokerUrl")
            if not broker_url:
                raise AbError(f"{self.build.who()}: this build has no Pulsar binary port (no brokerUrl)")
            return str(broker_url)
        return f"ws://127.0.0.1:{self.process.ready['port']}"


def run_phase(
    side: Standalone, phase: Phase, messages: int, meter: Meter, tmp: Path
) -> tuple[float, dict[str, Any]]:
    build = side.build
    # The official client is the same for both builds (this venv's `pulsar-client`, which a build's own venv
    # lacks: it installs what running needs); the other phases use each build's own `magnetar perf`.
    client = [sys.executable, "-m", "magnetar.admin.cli"] if phase.protocol == "pulsar" else build.magnetar()
    command = [
        *client,
        "perf", phase.verb, "--protocol", phase.protocol, "--messages", str(messages), *phase.extra,
        "--url", side.url(phase.protocol), "--topic", f"ab-{phase.protocol}", "--report-interval-s", "1000",
    ]  # fmt: skip
    env = dict(os.environ) if phase.protocol == "pulsar" else {**os.environ, **build.env}
    token = meter.begin(side.process.pid)
    started = time.monotonic()
    log = tmp / f"{side.name}-{phase.verb}-{phase.protocol}.log"
    with log.open("w") as err:
        try:
            done = subprocess.run(
                command,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=PHASE_TIMEOUT_S,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:  # run() has killed the client
            raise AbError(f"{build.who()} {phase.name}: not done after {PHASE_TIMEOUT_S:.0f} s") from exc
    value = meter.end(token)
    wall = time.monotonic() - started
    if done.returncode != 0 or not done.stdout.strip():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise AbError(
            f"{build.who()} {phase.name}: `magnetar perf {phase.verb}` exited {done.returncode}:\n{tail}"
        )
    last = done.stdout.strip().splitlines()[-1]
    try:
        summary: dict[str, Any] = json.loads(last)
        count = int(summary["messages"])
    except (ValueError, KeyError, TypeError) as exc:
        raise AbError(f"{build.who()} {phase.name}: no summary from `magnetar perf`: {last[:300]!r}") from exc
    if count <= 0:
        raise AbError(f"{build.who()} {phase.name}: no message went through")
    record = {
        "messages": count,
        "rate_msg_s": summary.get("rate_msg_s"),
        "wall_s": round(wall, 2),
        "errors": summary.get("errors", 0),
    }
    if phase.p99:
        try:
            return float(summary["latency_ms"]["p99"]), record
        except (KeyError, TypeError, ValueError) as exc:
            raise AbError(f"{build.who()} {phase.name}: no latency in the summary: {last[:300]!r}") from exc
    return value / count, record


def run_round(
    plan: Round,
    phases: Sequence[Phase],
    messages: dict[str, int],
    meter: Meter,
    runs: list[dict[str, Any]],
    progress: Callable[[str], None],
) -> None:
    with tempfile.TemporaryDirectory(prefix=f"ab-round{plan.index}-") as tmp_name:
        tmp = Path(tmp_name)
        sides = [Standalone(plan.first, "first", tmp), Standalone(plan.second, "second", tmp)]
        try:
            for side in sides:
                side.start()
            for number, phase in enumerate(phases):
                order = [0, 1] if number % 2 == 0 else [1, 0]
                for slot in order:
                    value, record = run_phase(sides[slot], phase, messages[phase.protocol], meter, tmp)
                    where = "old" if slot == plan.old_slot else "new"
                    runs.append(
                        {"round": plan.index, "kind": plan.kind, "phase": phase.name, "build":
                         sides[slot].build.label, "slot": where, "per_message": value, **record}
                    )  # fmt: skip
                    rate = record["rate_msg_s"] or 0
                    unit = meter.measure.unit + ("/msg" if meter.measure.per else "")
                    progress(
                        f"  {phase.name:<15} {sides[slot].build.label} ({where} place) "
                        f"{value:10.{meter.measure.digits}f} {unit}  "
                        f"{rate / 1000:6.1f}k msg/s  {record['wall_s']:5.1f} s"
                    )
        finally:
            for side in sides:
                side.process.stop()


# ---------------------------------------------------------------------------------------------------- report


def uptime() -> str:
    done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


# ---------------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    old = parser.add_mutually_exclusive_group(required=True)
    old.add_argument("--old", help="the earlier revision (anything `git rev-parse` takes)")
    old.add_argument("--old-pythonpath", help="run the old build from this directory on PYTHONPATH instead")
    old.add_argument(
        "--report",
        metavar="FILE",
        help=f"measure nothing: print the report of a saved run again (e.g. {LAST_RUN.relative_to(REPO)})",
    )
    parser.add_argument("--new", help="the later revision (default: the working tree and its .venv)")
    parser.add_argument("--pairs", type=int, default=12, help="A/B pairs, as many A/A pairs (default: 12)")
    parser.add_argument("--json-messages", type=int, default=100_000, help="messages per JSON phase")
    parser.add_argument("--binary-messages", type=int, default=300_000, help="messages per binary phase")
    parser.add_argument(
        "--pulsar-messages",
        type=int,
        default=30_000,
        help="messages per phase of the official client without batching (one entry each)",
    )
    parser.add_argument(
        "--protocols",
        default="json,binary",
        help="the phases to run, by protocol: json, binary, pulsar (default: json,binary)",
    )
    parser.add_argument(
        "--measure",
        choices=("auto", "cpu", "instructions"),
        default="auto",
        help="instructions per message where `perf stat` counts them (auto), else CPU time per message",
    )
    parser.add_argument(
        "--latency",
        type=int,
        metavar="RATE",
        help="measure the publish latency p99 at this rate (msgs/s) instead of the cost per message",
    )
    parser.add_argument("--latency-s", type=int, default=6, help="seconds per latency phase (default: 6)")
    parser.add_argument("--tolerance", type=float, default=3.0, help="the regression (%%) the guard is for")
    parser.add_argument("--markdown", action="store_true", help="print the result as a RESULTS.md entry")
    parser.add_argument("--make-command", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if min(args.json_messages, args.binary_messages, args.pulsar_messages) < 1:
        parser.error("message counts must be at least 1")
    protocols = [name.strip() for name in args.protocols.split(",") if name.strip()]
    if not protocols or any(name not in ("json", "binary", "pulsar") for name in protocols):
        parser.error(f"--protocols takes json, binary and/or pulsar, got {args.protocols!r}")
    args.protocols = protocols
    if args.latency is not None and not 1 <= args.latency <= 1_000_000:
        parser.error(f"--latency takes a rate of 1 to 1,000,000 msgs/s, got {args.latency}")
    if not 1 <= args.latency_s <= 600:
        parser.error(f"--latency-s takes 1 to 600 seconds, got {args.latency_s}")
    return args


def progress(message: str) -> None:
    print(f"[bench-ab {datetime.datetime.now(datetime.UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C and SIGTERM (a killed ``make``) unwind the run, so every ``finally`` stops its processes; SIGINT
    too when the shell that started the run ignored it (a background job)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, handler) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, action in previous.items():
            signal.signal(number, action)


def choose_meter(choice: str) -> Meter:
    if choice == "cpu":
        return CpuMeter()
    event = counter_event()
    if event is not None:
        SCRATCH.mkdir(parents=True, exist_ok=True)
        return InstructionsMeter(event, SCRATCH)
    if choice == "instructions":
        raise AbError("--measure instructions: `perf stat -e instructions` counts nothing on this machine")
    return CpuMeter()


def tool_command(argv: Sequence[str]) -> str:
    """This tool's command line as it ran, less the Makefile's hidden ``--make-command``."""
    kept = list(argv)
    for index, arg in enumerate(argv):
        if arg == "--make-command":
            kept = [*argv[:index], *argv[index + 2 :]]
        elif arg.startswith("--make-command="):
            kept = [*argv[:index], *argv[index + 1 :]]
    return shlex.join([os.path.relpath(sys.executable, REPO), os.path.relpath(__file__, REPO), *kept])


def run(args: argparse.Namespace, tool: str) -> Report:
    if args.old_pythonpath:
        old = pythonpath_build(args.old_pythonpath)
    else:
        old = revision_build("old", args.old, progress)
    new = revision_build("new", args.new, progress) if args.new else working_tree_build(progress)
    meter: Meter
    if args.latency is not None:
        meter = LatencyMeter(args.latency)
        phases = [p for p in latency_phases(args.latency, args.latency_s) if p.protocol in args.protocols]
        messages = dict.fromkeys(("json", "binary"), args.latency * args.latency_s)
    else:
        meter = choose_meter(args.measure)
        phases = [phase for phase in PHASES if phase.protocol in args.protocols]
        messages = {
            "json": args.json_messages,
            "binary": args.binary_messages,
            "pulsar": args.pulsar_messages,
        }
    progress(f"measure: {meter.measure.description}")
    runs: list[dict[str, Any]] = []
    saved: dict[str, Any] = {
        "command": args.make_command or tool,
        "tool": tool if args.make_command else None,
        "started": datetime.datetime.now(datetime.UTC).isoformat(),
        "ended": None,
        "load_start": uptime(),
        "load_end": None,
        "old": old.name,
        "new": new.name,
        "old_detail": old.detail,
        "new_detail": new.detail,
        "measure": measure_fields(meter.measure),
        "pairs": args.pairs,
        "messages": {protocol: messages[protocol] for protocol in args.protocols},
        "tolerance": args.tolerance,
        "runs": runs,
    }
    progress(f"uptime: {saved['load_start']}")
    rounds = schedule(old, new, args.pairs)
    clock = time.monotonic()
    try:
        for plan in rounds:
            elapsed = time.monotonic() - clock
            left = ""
            if plan.index:
                left = f", about {elapsed / plan.index * (len(rounds) - plan.index) / 60:.0f} min left"
            progress(f"round {plan.index + 1}/{len(rounds)} {plan.title()} ({elapsed / 60:.1f} min{left})")
            run_round(plan, phases, messages, meter, runs, progress)
        saved["load_end"] = uptime()
        saved["ended"] = datetime.datetime.now(datetime.UTC).isoformat()
        progress(f"uptime: {saved['load_end']}")
    finally:
        meter.close()
        SCRATCH.mkdir(parents=True, exist_ok=True)
        LAST_RUN.write_text(json.dumps(saved, indent=1) + "\n")
    return report_from_saved(saved)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.report:
        try:
            again = report_from_saved(json.loads(Path(args.report).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"bench-ab: --report {args.report}: {exc!r}", file=sys.stderr)
            return 2
        print(again.markdown() if args.markdown else again.text())
        return 0
    try:
        with interruptible():
            report = run(args, tool_command(argv))
    except AbError as exc:
        print(f"bench-ab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench-ab: interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    print(report.markdown() if args.markdown else report.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
