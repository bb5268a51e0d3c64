"""The audit's memory attacks against a real ``magnetar standalone``, scaled down, with the server's memory
read from ``/proc/<pid>/status``: every queue a client can fill is bounded, so its RSS grows by at most a
few tens of MiB whatever the client sends (before the bounds, each of these attacks grew it by 100-400 MiB
at this scale, and by gigabytes at the audit's; tests/bench/RESULTS.md has the figures). And a producer at
full speed meets a full bookie write cache with back-pressure, not send errors.

The attacks are in ``fixtures/ws_attacks.py``; ``tests/bench/bounds_attacks.py`` runs them at the audit's
scale.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures import ws_attacks as attacks
from fixtures.auth import TokenKeys
from fixtures.processes import MagnetarProcess, ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]

HOST = "127.0.0.1"
GROWTH_MIB_MAX = 40
"""What any one attack may add to the server's RSS (its bounded queues, plus the caches it fills)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def start_standalone(
    group: ProcessGroup, tmp: Path, name: str, *extra: str, env: dict[str, str] | None = None
) -> MagnetarProcess:
    args = [
        "standalone", "--data-dir", str(tmp / name), "--http-port", "0",
        "--bookie-port", str(free_port()), *extra,
    ]  # fmt: skip
    process = MagnetarProcess(name, args, tmp, env)
    group.processes.append(process)
    process.start(timeout_s=60)
    return process


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    tmp = tmp_path_factory.mktemp("bounds")
    group = ProcessGroup(tmp)
    try:
        yield start_standalone(group, tmp, "standalone")
    finally:
        group.stop_all()


def port_of(process: MagnetarProcess) -> int:
    return int(process.ready["port"])


def check(result: attacks.AttackResult, process: MagnetarProcess) -> None:
    print(result.line())
    assert process.is_running(), process.log_tail()
    assert attacks.server_alive(HOST, port_of(process)) < 10
    assert result.growth_mib < GROWTH_MIB_MAX, result.line()


def test_empty_messages(standalone: MagnetarProcess) -> None:
    """300,000 empty messages (1.7 MiB sent) grew the server by 100-400 MiB: they weighed nothing against the
    receive queue's byte bound and never woke the handler."""
    result = attacks.empty_messages(HOST, port_of(standalone), standalone.pid, 300_000, 6)
    check(result, standalone)


def test_ping_flood_from_a_client_that_never_reads(standalone: MagnetarProcess) -> None:
    result = attacks.ping_flood(HOST, port_of(standalone), standalone.pid, 800_000, 6)
    check(result, standalone)


def test_one_byte_fragments(standalone: MagnetarProcess) -> None:
    """A message in 1-byte continuation frames cost ~110 bytes of server memory per byte sent."""
    result = attacks.fragments(HOST, port_of(standalone), standalone.pid, 1024 * 1024, 1, 6)
    check(result, standalone)
    assert result.notes["closed_with"] == 1008


def test_zero_byte_fragments(standalone: MagnetarProcess) -> None:
    """Empty continuation frames never reached the message size limit: nothing bounded them."""
    result = attacks.fragments(HOST, port_of(standalone), standalone.pid, 4_000_000, 0, 6)
    check(result, standalone)
    assert result.notes["closed_with"] == 1008


@pytest.fixture
def with_backlog(magnetar_processes: ProcessGroup, tmp_path: Path) -> MagnetarProcess:
    """A standalone of its own (memory an earlier attack freed but kept would hide the next one's growth),
    with a topic ``backlog`` holding 50,000 messages of 1 KiB."""
    process = start_standalone(magnetar_processes, tmp_path, "backlog")
    attacks.publish(HOST, port_of(process), "backlog", 50_000, 1024)
    return process


def test_pull_consumer_granting_every_permit_and_never_reading(with_backlog: MagnetarProcess) -> None:
    result = attacks.greedy_pull_consumer(HOST, port_of(with_backlog), with_backlog.pid, "backlog", 6)
    check(result, with_backlog)


def test_reader_answering_without_reading(with_backlog: MagnetarProcess) -> None:
    """Each ``{}`` released one more message into a queue nobody read."""
    result = attacks.blind_reader(HOST, port_of(with_backlog), with_backlog.pid, "backlog", 6)
    check(result, with_backlog)


def test_bodies_announced_without_a_token(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    """20 requests announcing 10 MiB bodies without a token held 200 MiB until each got its 401."""
    key = tmp_path / "secret.key"
    key.write_bytes(token_keys.secret)
    process = start_standalone(
        magnetar_processes, tmp_path, "secure",
        "--authentication-enabled", "--token-secret-key", key.as_uri(), "--super-user-roles", "admin",
    )  # fmt: skip
    result = attacks.bodies_before_auth(HOST, port_of(process), process.pid, 20, 10 << 20)
    check(result, process)
    assert result.notes["answers"] == {"401": 20}


def test_a_full_speed_producer_meets_back_pressure_not_errors(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    """With a 24 MiB write cache, four binary producers of 1 KiB messages at full speed got 360,000 send
    errors beside 416,000 acknowledged messages in 15 s: the bookie refused adds while flushing, and each
    refusal failed a batch."""
    env = {"MAGNETAR_STORAGE_ENGINE__WRITE_CACHE_BYTES_MAX": str(24 << 20)}
    process = start_standalone(magnetar_processes, tmp_path, "producer", env=env)
    command = [
        sys.executable, "-m", "magnetar.admin.cli", "perf", "produce",
        "--url", f"ws://{HOST}:{port_of(process)}", "--topic", "full-speed", "--protocol", "binary",
        "--size", "1024", "--producers", "4", "--duration-s", "10", "--report-interval-s", "100",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    print(summary)
    assert summary["messages"] > 50_000
    assert summary["errors"] == 0
    assert "refused by storage" not in process.log_tail(10_000)
