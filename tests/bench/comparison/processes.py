"""Server processes of the comparison: started on free loopback ports, stopped by their pid.

:class:`ServerProcess` starts one command in its own session (so a wrapper script and the server it forks -
``rabbitmq-server`` runs ``beam.smp`` as a child of a shell - form one process group whose id is our child's
pid), sends its output to a log file, and :meth:`ServerProcess.stop` ends it: SIGTERM to that group, SIGKILL
after ``stop_timeout_s``. Nothing is ever signalled by name. :func:`wait_for_port` polls a TCP port (bounded)
and reports the log tail if the process died or never listened.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

READY_POLL_S = 0.05
"""Polling another process's port: there is no event to wait on."""


class ServerFailed(RuntimeError):
    pass


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the usual bind-to-0 probe)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ServerProcess:
    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stop_timeout_s: float = 20.0,
        ready_line: bool = False,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.stop_timeout_s = stop_timeout_s
        self.ready_line = ready_line
        """The process prints a JSON ready line on stdout (Magnetar's commands); stderr goes to the log."""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise ServerFailed(f"{self.name} was never started")
        return self.process.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=subprocess.PIPE if self.ready_line else log,
                stderr=log if self.ready_line else subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        print(f"  [{self.name}] started pid {self.process.pid}: {' '.join(self.command)}", flush=True)

    def read_ready_line(self, timeout_s: float) -> dict[str, Any]:
        """The JSON document of the first stdout line (bounded wait; a dead process raises)."""
        if self.process is None or self.process.stdout is None:
            raise ServerFailed(f"{self.name} was not started with ready_line=True")
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.fail(f"no ready line after {timeout_s} s")
            readable, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise self.fail(
                        f"exited with {self.process.wait(self.stop_timeout_s)} before it was ready"
                    )
                line += chunk
        document: dict[str, Any] = json.loads(line.split(b"\n", 1)[0])
        return document

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int | None:
        """SIGTERM to the process group our child leads, then SIGKILL; returns the child's exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                process.wait(self.stop_timeout_s)
        # Whatever the child forked into its group and left behind (it exited first) goes too.
        self._signal_group(signal.SIGKILL)
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def fail(self, message: str) -> ServerFailed:
        return ServerFailed(f"{self.name}: {message}\n--- {self.log_path} ---\n{log_tail(self.log_path)}")


LEFTOVER_MARKERS = (b"magnetar.admin.cli", b"zookeeper")
"""What the command line of a process a Magnetar supervisor started contains (a pid the kernel has given to
another program since is not touched)."""


def kill_leftovers(name: str, pids: Sequence[int], timeout_s: float = 5.0) -> list[int]:
    """SIGKILL, by pid, the processes a supervisor started that outlived it.

    ``magnetar dev-cluster`` runs its components in their own sessions and stops them itself on SIGTERM; a
    supervisor killed after ``stop_timeout_s`` (a wedged cluster) leaves them running, holding ports and
    disk. Its ready document lists their pids. Returns the pids killed, after waiting (bounded) until they
    are gone.
    """
    killed = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone
        if not any(marker in cmdline for marker in LEFTOVER_MARKERS):
            continue  # exited and its pid reused, or a zombie (empty command line)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            print(f"  [{name}] pid {pid} outlived its supervisor: killed", flush=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_running(pid) for pid in killed):
        time.sleep(READY_POLL_S)
    return killed


def _running(pid: int) -> bool:
    """Not gone and not a zombie (an orphan's zombie lasts until init reaps it)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() != b""
    except OSError:
        return False


def wait_for_port(server: ServerProcess, port: int, timeout_s: float) -> None:
    """Until 127.0.0.1:``port`` accepts a connection; the server dying or the deadline passing raises."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.running():
            raise server.fail(f"exited with {server.process.returncode if server.process else None}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(READY_POLL_S)
    raise server.fail(f"not listening on 127.0.0.1:{port} after {timeout_s} s")


def run_tool(command: Sequence[str], timeout_s: float = 30.0, env: Mapping[str, str] | None = None) -> str:
    """A short command's stdout+stderr (a version, a control command); a failure is returned, not raised."""
    try:
        done = subprocess.run(
            list(command),
            capture_output=True,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({type(exc).__name__}: {exc})"
    return (done.stdout + done.stderr).decode(errors="replace").strip()
