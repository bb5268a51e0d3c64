"""A trio instrument that finds what stalls the event loop: task steps longer than a threshold.

Theory of operation. Everything in a Magnetar process runs on one trio thread, so a task step (the code a task
runs between two awaits) that takes 20 ms delays every other task by 20 ms: a publish that arrives meanwhile
waits for it, which is what a latency tail is made of. :class:`LoopMonitor` times every step with
``time.perf_counter`` (wall time: a step preempted by the OS counts too, as it stalls the loop as much) and
keeps, per task name, how many steps exceeded ``slow_step_ms`` and the longest one; each slow step is also
logged at WARNING with its task, so a run shows which code holds the loop. Garbage-collector passes are timed
too (``gc.callbacks``), per generation, since a collection stalls whichever step triggered it. The cost is
two clock reads per task step, so it is off unless asked for (``magnetar standalone`` or ``magnetar broker``
with ``MAGNETAR_LOOP_MONITOR_MS``, or :func:`install_from_environment`).
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import trio
import trio.lowlevel

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "MAGNETAR_LOOP_MONITOR_MS"


@dataclass(slots=True)
class SlowSteps:
    count: int = 0
    longest_ms: float = 0.0
    total_ms: float = 0.0


class LoopMonitor(trio.abc.Instrument):
    def __init__(self, slow_step_ms: float, *, log_each: bool = True) -> None:
        self.slow_step_s = slow_step_ms / 1000
        self.log_each = log_each
        self.steps = 0
        self.slow: dict[str, SlowSteps] = {}
        self.gc_passes: dict[int, SlowSteps] = {}
        """Garbage-collector passes by generation (a pass stalls whatever step triggered it)."""
        self._started = time.perf_counter()  # installed from inside a task step: it ends after this
        self._gc_started = 0.0

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` hook: times every collection."""
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        elapsed_ms = (time.perf_counter() - self._gc_started) * 1000
        entry = self.gc_passes.setdefault(info.get("generation", -1), SlowSteps())
        entry.count += 1
        entry.total_ms += elapsed_ms
        entry.longest_ms = max(entry.longest_ms, elapsed_ms)
        if self.log_each and elapsed_ms >= self.slow_step_s * 1000:
            log.warning("slow GC pass: %.1f ms in generation %s", elapsed_ms, info.get("generation"))

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        elapsed = time.perf_counter() - self._started
        self.steps += 1
        if elapsed < self.slow_step_s:
            return
        entry = self.slow.get(task.name)
        if entry is None:
            entry = self.slow[task.name] = SlowSteps()
        elapsed_ms = elapsed * 1000
        entry.count += 1
        entry.total_ms += elapsed_ms
        entry.longest_ms = max(entry.longest_ms, elapsed_ms)
        if self.log_each:
            log.warning("slow event-loop step: %.1f ms in task %s", elapsed_ms, task.name)

    def report(self) -> str:
        """The slow steps per task, longest first (for logs at exit)."""
        lines = [f"{self.steps} task steps; slower than {self.slow_step_s * 1000:g} ms:"]
        for name, entry in sorted(self.slow.items(), key=lambda item: -item[1].longest_ms):
            longest, total = f"{entry.longest_ms:.1f}", f"{entry.total_ms:.0f}"
            lines.append(f"  {entry.count} steps, longest {longest} ms, total {total} ms: {name}")
        for generation, entry in sorted(self.gc_passes.items()):
            longest, total = f"{entry.longest_ms:.1f}", f"{entry.total_ms:.0f}"
            lines.append(
                f"  GC generation {generation}: {entry.count} passes, longest {longest} ms, total {total} ms"
            )
        return "\n".join(lines)


def install_from_environment() -> LoopMonitor | None:
    """Add a :class:`LoopMonitor` to the running trio loop when ``MAGNETAR_LOOP_MONITOR_MS`` is set."""
    value = os.environ.get(ENVIRONMENT_VARIABLE)
    if not value:
        return None
    monitor = LoopMonitor(float(value))
    trio.lowlevel.add_instrument(monitor)
    # The stdlib collector (``import gc`` would name Magnetar's own top-level gc/ folder for mypy).
    collector: Any = importlib.import_module("gc")
    collector.callbacks.append(monitor.on_gc)
    log.warning("event-loop monitor on: steps over %s ms are logged", value)
    return monitor
