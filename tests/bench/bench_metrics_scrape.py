"""What a ``/metrics`` scrape of a broker with many topics costs: size, time, and the longest event-loop step.

    .venv/bin/python tests/bench/bench_metrics_scrape.py [--topics 3000] [--scrapes 5] [--aggregate]

A broker (the admin layer's storage metrics included) runs in a thread of its own with in-process bookies
(``tests/fixtures/broker.py``); ``--topics`` topics are loaded, each with one durable subscription and one
message. Each scrape is a plain ``GET /metrics`` from this thread (and one more with ``Accept-Encoding:
gzip``). While it runs, a :class:`~magnetar.bookkeeper.runtime.loop_monitor.LoopMonitor` times every task
step of the broker's loop, and a ticker task in that loop sleeps 1 ms in a loop and records how late it
wakes up: the longest step is how long every other task (a publish, a delivery) had to wait. ``--aggregate``
turns ``expose_topic_level_metrics_in_prometheus`` off (per-namespace figures).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.admin import admin_extras
from fixtures.broker import Cluster

from magnetar.bookkeeper.runtime.loop_monitor import LoopMonitor
from magnetar.broker.wire.topic_name import TopicName

LOAD_CONCURRENCY = 50
NEWLINE = b"\n"


class CpuSteps(trio.abc.Instrument):
    """The CPU time of the longest task step (``thread_time``: unlike wall time, it does not count the time
    the OS gave the core to another process - on a loaded machine that is most of a long wall-clock step)."""

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self._started: float | None = None  # the step that adds the instrument was not timed

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._started is not None:
            self.longest_ms = max(self.longest_ms, (time.thread_time() - self._started) * 1000)


class Ticker:
    """Sleeps 1 ms in a loop inside the broker's trio loop; ``late_ms`` is the worst oversleep seen."""

    def __init__(self) -> None:
        self.late_ms = 0.0
        self.stop = trio.Event()

    async def run(self) -> None:
        while not self.stop.is_set():
            before = trio.current_time()
            await trio.sleep(0.001)
            self.late_ms = max(self.late_ms, (trio.current_time() - before - 0.001) * 1000)


async def load_topics(service: Any, count: int) -> None:
    async def load(index: int) -> None:
        topic = await service.get_topic(TopicName.of("public", "default", f"metered-topic-{index:05d}"))
        await topic.get_or_create_subscription("metered-subscription", start_earliest=True)
        topic.ml.add_entry_nowait(b"x" * 100, lambda result: None)

    limiter = trio.CapacityLimiter(LOAD_CONCURRENCY)

    async def limited(index: int) -> None:
        async with limiter:
            await load(index)

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(limited, index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=3000)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--aggregate", action="store_true")
    args = parser.parse_args()
    cluster = Cluster(bookies=2)
    cluster.start()
    try:
        overrides: dict[str, Any] = {}
        if args.aggregate:
            overrides["expose_topic_level_metrics_in_prometheus"] = False
        broker = cluster.start_broker(extras=admin_extras, **overrides)
        started = time.monotonic()
        broker.call(load_topics, broker.service, args.topics)
        print(f"{args.topics} topics loaded in {time.monotonic() - started:.1f} s")
        monitor = LoopMonitor(0.0, log_each=False)
        broker.call_sync(trio.lowlevel.add_instrument, monitor)
        cpu = CpuSteps()
        broker.call_sync(trio.lowlevel.add_instrument, cpu)
        ticker = Ticker()

        async def start_ticker() -> None:
            assert cluster._nursery is not None
            cluster._nursery.start_soon(ticker.run)

        broker.call(start_ticker)
        time.sleep(0.5)
        with httpx.Client(base_url=broker.http_url, timeout=60) as http:
            for encoding in ("identity", "gzip"):
                seconds, steps, lates, sizes, cpu_steps, longest_task = [], [], [], [], [], ""
                for _ in range(args.scrapes):
                    broker.call_sync(monitor.slow.clear)
                    ticker.late_ms = cpu.longest_ms = 0.0
                    began = time.perf_counter()
                    with http.stream("GET", "/metrics", headers={"accept-encoding": encoding}) as response:
                        raw = b"".join(response.iter_raw())
                    seconds.append(time.perf_counter() - began)
                    sizes.append(len(raw))
                    text = gzip.decompress(raw) if response.headers.get("content-encoding") == "gzip" else raw
                    name, entry = max(monitor.slow.items(), key=lambda item: item[1].longest_ms)
                    steps.append(entry.longest_ms)
                    longest_task = name
                    lates.append(ticker.late_ms)
                    cpu_steps.append(cpu.longest_ms)
                print(
                    f"accept-encoding {encoding}: body {statistics.median(sizes) / 1e6:.2f} MB on the wire "
                    f"({len(text) / 1e6:.2f} MB of text, {text.count(NEWLINE)} lines), "
                    f"scrape {statistics.median(seconds) * 1000:.0f} ms median, "
                    f"longest loop step {max(steps):.1f} ms "
                    f"(median of scrapes {statistics.median(steps):.1f} ms, "
                    f"task {longest_task[:60]!r}), ticker late by at most {max(lates):.1f} ms; "
                    f"longest step in CPU time {max(cpu_steps):.1f} ms "
                    f"(median {statistics.median(cpu_steps):.1f})"
                )
        broker.call_sync(ticker.stop.set)
        broker.call_sync(trio.lowlevel.remove_instrument, monitor)
        broker.call_sync(trio.lowlevel.remove_instrument, cpu)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
