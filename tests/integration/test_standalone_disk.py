"""A ``magnetar standalone`` with its default sizes gives the disk back once its topics are deleted.

Only the time scale is shortened, so the test takes seconds instead of minutes: garbage collection every
2 s instead of 60 (``MAGNETAR_GC__GC_WAIT_TIME_S``) and checkpoints every second instead of 10
(``MAGNETAR_STORAGE_ENGINE__CHECKPOINT_INTERVAL_MS``). Sizes are the defaults: 16 MB published stay in the
64 MiB entry log being written, the case where BookKeeper's behaviour - never collect the log being written -
gave nothing back until the log filled up (1 GiB with BookKeeper's default size).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fixtures.processes import MagnetarProcess, ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]

TIME_SCALE = {"MAGNETAR_GC__GC_WAIT_TIME_S": "2", "MAGNETAR_STORAGE_ENGINE__CHECKPOINT_INTERVAL_MS": "1000"}
TOPICS = ("disk-a", "disk-b")
MESSAGES_PER_TOPIC = 8_000
PAYLOAD_BYTES = 1024


def allocated_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (what ``du`` counts)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def publish(url: str, topic: str) -> None:
    command = [
        sys.executable, "-m", "magnetar.admin.cli", "perf", "produce", "--url", url,
        "--topic", f"persistent://public/default/{topic}", "--protocol", "binary",
        "--size", str(PAYLOAD_BYTES), "--messages", str(MESSAGES_PER_TOPIC), "--duration-s", "120",
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=180)


def wait_for(predicate_bytes: int, path: Path, *, below: bool, timeout_s: float) -> int:
    """Poll ``path``'s allocated bytes until below (or at least) ``predicate_bytes``; the last figure."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = allocated_bytes(path)
        if (now < predicate_bytes) if below else (now >= predicate_bytes):
            return now
        if time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def test_deleting_topics_gives_the_disk_back_with_the_default_sizes(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    process = MagnetarProcess(
        "standalone",
        ["standalone", "--data-dir", str(data_dir), "--http-port", "0", "--bookie-port", str(free_port())],
        magnetar_processes.log_dir,
        env=TIME_SCALE,
    )
    magnetar_processes.processes.append(process)
    url = str(process.start()["httpUrl"])
    for topic in TOPICS:
        publish(url, topic)
    entry_logs = data_dir / "bookie-0" / "ledgers"
    published = len(TOPICS) * MESSAGES_PER_TOPIC * PAYLOAD_BYTES
    written = wait_for(int(published * 0.9), entry_logs, below=False, timeout_s=30)  # checkpointed
    assert written >= published * 0.9, f"only {written} bytes reached the entry logs"
    total_before = allocated_bytes(data_dir)
    with httpx.Client(base_url=url, timeout=60) as http:
        usage = http.get("/api/v1/bookie/entry_log_usage").json()[0]
        assert usage["entryLogs"] == [], "everything is still in the one entry log being written"
        for topic in TOPICS:
            answer = http.delete(f"/admin/v2/persistent/public/default/{topic}", params={"force": "true"})
            assert answer.status_code == 204, answer.text
        began = time.monotonic()
        left = wait_for(int(written * 0.05), entry_logs, below=True, timeout_s=60)
        seconds = time.monotonic() - began
        assert left < written * 0.05, f"entry logs still hold {left} of {written} bytes after {seconds:.0f} s"
        total_after = allocated_bytes(data_dir)
        assert total_after < total_before - 0.9 * written, (total_before, total_after)
        details = http.get("/api/v1/bookie/gc_details").json()[0]
        assert details["sealedActiveEntryLogs"] >= 1
        assert details["deletedEntryLogs"] >= 1
    print(f"entry logs {written} -> {left} bytes in {seconds:.1f} s; all {total_before} -> {total_after}")
    assert process.stop() == 0, process.log_tail()
