"""Errors a new user meets, as real processes print them: each names what is wrong and what changes it.

A port held by another process (a real listening socket here), a data directory held by another process, a
metadata store that cannot be reached: ``magnetar standalone``, ``broker`` and ``bookie`` exit 1 with one
line that names the port (or directory, or URL), the component that wanted it, and the flag and
``MAGNETAR_*`` variable that change it - not ``OSError: [Errno 98] Address already in use``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.auth import TlsFiles
from fixtures.processes import ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]

EXIT_FAILED = 1
IN_USE = f"the port is already in use by pid {os.getpid()} ("
"""The test process holds the busy port, and the error names it."""
FAST_METADATA = {"MAGNETAR_METADATA_OPERATION_TIMEOUT_MS": "2000"}
"""A missing store is reported after this wait (30 s by default)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process (this test) listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port: int = holder.getsockname()[1]
        yield port


def magnetar(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``magnetar ARGS`` until it exits on its own (it is killed if it does not within the timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "magnetar.admin.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env={**os.environ, **(env or {})},
    )


def failure(done: subprocess.CompletedProcess[str], kind: str) -> str:
    """The process's ``<kind> failed: ...`` line, after checking it exited 1 without a traceback."""
    assert done.returncode == EXIT_FAILED, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if f"{kind} failed: " in line]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0].split(f"{kind} failed: ", 1)[1]


def standalone(data_dir: Path, *extra: str, http_port: str = "0", bookie_port: int = 0) -> list[str]:
    return [
        "standalone", "--data-dir", str(data_dir), "--http-port", http_port,
        "--bookie-port", str(bookie_port or free_port()), *extra,
    ]  # fmt: skip


def test_standalone_names_its_busy_http_port(busy_port: int, tmp_path: Path) -> None:
    message = failure(magnetar(*standalone(tmp_path, http_port=str(busy_port))), "standalone")
    assert message.startswith(f"broker HTTP cannot listen on 127.0.0.1:{busy_port}: {IN_USE}")
    assert message.endswith("choose another port with --http-port or MAGNETAR_HTTP_PORT")


def test_standalone_names_its_busy_bookie_port(busy_port: int, tmp_path: Path) -> None:
    message = failure(magnetar(*standalone(tmp_path, bookie_port=busy_port)), "standalone")
    assert message.startswith(f"bookie 0 (bookie protocol) cannot listen on 127.0.0.1:{busy_port}:")
    assert "already in use" in message
    assert message.endswith("choose another port with --bookie-port or MAGNETAR_BOOKIE_PORT")


def test_a_standalone_retried_with_another_bookie_port_after_a_taken_one_starts(
    busy_port: int, tmp_path: Path, magnetar_processes: ProcessGroup
) -> None:
    """The failed start wrote no bookie identity (cookie): the retry on the same data directory with
    --bookie-port is a new bookie, not one whose port changed."""
    data_dir = tmp_path / "data"
    message = failure(magnetar(*standalone(data_dir, bookie_port=busy_port)), "standalone")
    assert f"cannot listen on 127.0.0.1:{busy_port}: {IN_USE}" in message
    assert not (data_dir / "bookie-0").exists()
    retry = magnetar_processes.add("retry", standalone(data_dir))
    assert retry.ready["event"] == "standalone-ready"
    assert "BookieIdentityError" not in retry.log_path.read_text()
    assert retry.stop() == 0


def test_a_taken_http_port_fails_the_standalone_before_its_bookies_are_created(
    busy_port: int, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    message = failure(magnetar(*standalone(data_dir, http_port=str(busy_port))), "standalone")
    assert message.startswith(f"broker HTTP cannot listen on 127.0.0.1:{busy_port}: {IN_USE}")
    assert not (data_dir / "bookie-0").exists()


@pytest.fixture
def busy_port_after_a_free_one() -> Iterator[int]:
    """A port this test listens on whose predecessor is free when the test starts (for bookie 0's port;
    bound and let go here, so it is not one another process on this machine happens to hold)."""
    for _ in range(100):
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            port: int = holder.getsockname()[1]
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port - 1))
                except OSError:
                    continue
            holder.listen()
            yield port
            return
    raise AssertionError("no listening port with a free predecessor in 100 tries")


def test_standalone_says_how_a_second_bookie_port_is_derived(
    busy_port_after_a_free_one: int, tmp_path: Path
) -> None:
    busy_port = busy_port_after_a_free_one
    done = magnetar(*standalone(tmp_path, "--bookies", "2", bookie_port=busy_port - 1))
    message = failure(done, "standalone")
    assert message.startswith(f"bookie 1 (bookie protocol) cannot listen on 127.0.0.1:{busy_port}:")
    assert "(bookie 1 listens on bookie_port + 1)" in message
    assert message.endswith("--bookie-port or MAGNETAR_BOOKIE_PORT")


def test_standalone_names_its_busy_https_port(busy_port: int, tmp_path: Path, tls_files: TlsFiles) -> None:
    tls = (
        "--http-port-tls", str(busy_port), "--tls-certificate-file", str(tls_files.server_cert),
        "--tls-key-file", str(tls_files.server_key),
    )  # fmt: skip
    message = failure(magnetar(*standalone(tmp_path, *tls)), "standalone")
    assert message.startswith(f"broker HTTPS cannot listen on 127.0.0.1:{busy_port}:")
    assert message.endswith("choose another port with --http-port-tls or MAGNETAR_HTTP_PORT_TLS")


def test_standalone_names_a_bind_address_that_does_not_resolve(tmp_path: Path) -> None:
    message = failure(magnetar(*standalone(tmp_path, "--bind", "no-such-host.invalid")), "standalone")
    assert message.startswith("broker HTTP cannot listen: address 'no-such-host.invalid' does not resolve")
    assert message.endswith("set another address with --bind or MAGNETAR_BIND_ADDRESS")


def test_standalone_names_a_data_directory_another_standalone_holds(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    first = magnetar_processes.add("first", standalone(data_dir))
    assert first.ready["event"] == "standalone-ready"
    message = failure(magnetar(*standalone(data_dir)), "standalone")
    assert f"metadata store {data_dir / 'metadata'} is held by another process" in message
    assert "is another magnetar standalone running on this data directory?" in message
    assert message.endswith("another directory: --data-dir or MAGNETAR_DATA_DIR")
    assert first.is_running()


def test_standalone_names_a_data_directory_it_cannot_create(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    data_dir = tmp_path / "a-file" / "data"
    message = failure(magnetar(*standalone(data_dir)), "standalone")
    assert message == (
        f"cannot use {data_dir} as the data directory: Not a directory; "
        "choose another directory with --data-dir or MAGNETAR_DATA_DIR"
    )


def test_broker_names_its_busy_http_port(busy_port: int) -> None:
    message = failure(magnetar("broker", "--http-port", str(busy_port)), "broker")
    assert message.startswith(f"broker HTTP cannot listen on 127.0.0.1:{busy_port}: {IN_USE}")
    assert message.endswith("choose another port with --http-port or MAGNETAR_HTTP_PORT")


def bookie(data_dir: Path, *extra: str, metadata_url: str = "memory://") -> list[str]:
    return [
        "bookie", "--metadata-url", metadata_url, "--data-dir", str(data_dir), "--bind", "127.0.0.1", *extra,
    ]  # fmt: skip


def test_bookie_names_its_busy_protocol_port(busy_port: int, tmp_path: Path) -> None:
    message = failure(magnetar(*bookie(tmp_path, "--port", str(busy_port))), "bookie")
    assert message.startswith(f"bookie protocol cannot listen on 127.0.0.1:{busy_port}: the port is already")
    assert message.endswith("choose another port with --port or MAGNETAR_PORT")


def test_bookie_names_its_busy_http_port(busy_port: int, tmp_path: Path) -> None:
    message = failure(magnetar(*bookie(tmp_path, "--port", "0", "--http-port", str(busy_port))), "bookie")
    assert message.startswith(f"bookie HTTP cannot listen on 127.0.0.1:{busy_port}: {IN_USE}")
    assert message.endswith("choose another port with --http-port or MAGNETAR_HTTP_PORT")


def test_bookie_names_a_data_directory_another_bookie_holds(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    data_dir = tmp_path / "bookie"
    first = magnetar_processes.bookie("first", "memory://", data_dir)
    assert first.ready["event"] == "bookie-ready"
    message = failure(magnetar(*bookie(data_dir, "--port", "0")), "bookie")
    assert message.startswith(f"bookie data directory {data_dir} is held by another process")
    assert "is another bookie running on this data directory?" in message
    assert message.endswith("--data-dir or MAGNETAR_DATA_DIR")
    assert first.is_running()


@pytest.mark.parametrize("kind", ["broker", "bookie"])
def test_a_zookeeper_that_is_not_running_is_named(kind: str, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    url = f"zk:127.0.0.1:{port}"
    args = ["broker", "--metadata-url", url, "--http-port", "0"] if kind == "broker" else []
    args = args or bookie(tmp_path, "--port", "0", metadata_url=url)
    message = failure(magnetar(*args, env=FAST_METADATA), kind)
    assert message.startswith(f"no ZooKeeper session with 127.0.0.1:{port} within 2000 ms")
    refused = "connection refused: nothing listens on that port (is ZooKeeper running?)"
    assert f"127.0.0.1:{port}: {refused}" in message
    assert message.endswith("check the metadata store URL (--metadata-url or MAGNETAR_METADATA_URL)")


def test_a_zookeeper_host_that_does_not_resolve_is_named() -> None:
    done = magnetar("broker", "--metadata-url", "zk:no-such-host.invalid:2181", env=FAST_METADATA)
    message = failure(done, "broker")
    assert "no-such-host.invalid:2181: the host name 'no-such-host.invalid' does not resolve" in message
    assert message.endswith("(--metadata-url or MAGNETAR_METADATA_URL)")


def test_a_metadata_url_that_names_no_store_is_named() -> None:
    message = failure(magnetar("broker", "--metadata-url", "zookeeper://x"), "broker")
    assert message.startswith("unsupported metadata store URL 'zookeeper://x': use memory://[NAME]")
    assert message.endswith("the metadata store is set with --metadata-url or MAGNETAR_METADATA_URL")
