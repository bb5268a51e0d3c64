"""Shared pieces of the ``magnetar perf`` benchmarks: bookie processes, percentiles, progress lines."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import trio


class BookieProcess:
    """A ``magnetar bookie`` child process on 127.0.0.1 port 0, stopped by pid."""

    def __init__(self, storage: str, data_dir: Path | None = None, metadata_url: str = "memory://") -> None:
        command = [
            sys.executable, "-m", "magnetar.admin.cli", "--log-level", "WARNING", "bookie",
            "--metadata-url", metadata_url, "--storage", storage, "--port", "0",
            "--bind", "127.0.0.1", "--advertised-address", "127.0.0.1",
        ]  # fmt: skip
        if data_dir is not None:
            command += ["--data-dir", str(data_dir)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise RuntimeError(f"the bookie exited with {self.process.returncode} before it was ready")
        self.bookie_id = str(json.loads(line)["bookieId"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextmanager
def bookie_processes(count: int, storage: str = "disk") -> Iterator[list[str]]:
    """``count`` bookie processes with data in a temporary directory; yields their bookie ids."""
    with tempfile.TemporaryDirectory(prefix="magnetar-perf-") as tmp:
        processes: list[BookieProcess] = []
        try:
            for i in range(count):
                processes.append(BookieProcess(storage, Path(tmp) / f"bookie{i}"))
            yield [p.bookie_id for p in processes]
        finally:
            for process in processes:
                process.stop()


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of ``sorted_values``; None when there is none (JSON has no NaN)."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def latency_summary_ms(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """p50/p99/p99.9/max in milliseconds; each None when nothing was measured (printed as JSON null)."""
    ordered = sorted(latencies_s)
    return {
        "p50_ms": _ms(percentile(ordered, 0.50)),
        "p99_ms": _ms(percentile(ordered, 0.99)),
        "p999_ms": _ms(percentile(ordered, 0.999)),
        "max_ms": _ms(ordered[-1] if ordered else None),
    }


def format_ms(value: float | None, spec: str = ".3f") -> str:
    """A latency figure for a progress or summary line: ``-`` when nothing was measured."""
    return "-" if value is None else format(value, spec)


class Progress:
    """Prints a progress line at most every ``interval_s`` seconds (long benchmarks must show life)."""

    def __init__(self, label: str, interval_s: float = 2.0) -> None:
        self.label = label
        self.interval_s = interval_s
        self._last = time.monotonic()

    def tick(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            print(f"  [{self.label}] {message}", flush=True)


async def messages_due(rate: float, start: float, sent: int) -> int:
    """How many messages an open-loop sender at ``rate`` msgs/s since ``start`` (``time.monotonic``) owes
    after ``sent`` of them (at least one): sleeps until the next one is due."""
    while True:
        due = int((time.monotonic() - start) * rate) + 1 - sent
        if due > 0:
            return due
        await trio.sleep(max(0.0, start + sent / rate - time.monotonic()))
