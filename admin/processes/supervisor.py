"""Child processes under trio: start, wait until ready, stop by pid, kill, pause, restart.

:class:`ManagedProcess` is one child of the dev cluster (a ZooKeeper server, a bookie, a broker). It is
addressed only by its pid, never by name. Its stderr (and, for processes without a ready line, its stdout) go
to a log file; a ``magnetar`` process announces readiness with one JSON line on stdout, which
:meth:`ManagedProcess.start` waits for (bounded by ``ready_timeout_s``), while a ZooKeeper server is ready
once a readiness probe says so. A process that exits before it is ready fails the start with the tail of its
log, so the reason is on screen.

Stopping is SIGCONT (a paused process cannot act on SIGTERM), SIGTERM, and SIGKILL after
``stop_timeout_s``. Children run in their own session: Ctrl-C in a terminal reaches only the supervisor,
which then stops them in order. (Linux's ``PR_SET_PDEATHSIG`` cannot guard against a supervisor killed with
SIGKILL here: it fires when the *thread* that forked exits, and trio forks in a worker thread of its cache.)

:meth:`ManagedProcess.watch` waits for the process to exit and reports an exit nobody asked for to
``on_unexpected_exit`` (a crash, or a fault a test injected with ``os.kill`` directly).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

log = logging.getLogger(__name__)

READY_LINE_BYTES_MAX = 64 * 1024
LOG_TAIL_LINES = 40

ReadinessProbe = Callable[[], Awaitable[bool]]


class ProcessStartError(RuntimeError):
    """A child did not become ready: it exited, timed out or announced something else."""


def magnetar_command(*args: str) -> list[str]:
    """The command line of a ``magnetar`` subcommand run by this Python interpreter."""
    return [sys.executable, "-m", "magnetar.admin.cli", *args]


class ManagedProcess:
    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        probe: ReadinessProbe | None = None,
        ready_timeout_s: float = 60.0,
        stop_timeout_s: float = 20.0,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.probe = probe
        """How readiness is known: None reads the JSON ready line on stdout; else polled until True."""
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.ready: dict[str, Any] = {}
        self.starts = 0
        self.paused = False
        """Stopped with SIGSTOP (by :meth:`pause`) and not resumed since."""
        self._process: trio.Process | None = None
        self._stopping = False
        self.exited = trio.Event()

    # -- state -------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.returncode

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        """Start the process and wait until it is ready; returns its ready document (``{}`` for probes)."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._stopping = False
        self.paused = False
        self.exited = trio.Event()
        self.starts += 1
        with self.log_path.open("ab") as log_file:
            log_file.write(f"--- start {self.starts}: {' '.join(self.command)}\n".encode())
            log_file.flush()
            self._process = await trio.lowlevel.open_process(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.probe is None else log_file,
                stderr=log_file,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        try:
            with trio.fail_after(self.ready_timeout_s):
                self.ready = await (self._read_ready_line() if self.probe is None else self._poll_probe())
        except trio.TooSlowError:
            await self._kill_quietly()
            raise ProcessStartError(
                f"{self.name} not ready after {self.ready_timeout_s} s:\n{self.log_tail()}"
            ) from None
        except BaseException:
            await self._kill_quietly()
            raise
        return self.ready

    async def _read_ready_line(self) -> dict[str, Any]:
        process = self._process
        assert process is not None
        assert process.stdout is not None
        buffered = b""
        while b"\n" not in buffered:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                await process.wait()
                raise self._exited_early(process.returncode)
            buffered += chunk
            if len(buffered) > READY_LINE_BYTES_MAX:
                raise ProcessStartError(f"{self.name} printed no ready line:\n{buffered[:200]!r}")
        line = buffered.split(b"\n", 1)[0]
        try:
            document: dict[str, Any] = json.loads(line)
        except ValueError:
            raise ProcessStartError(f"{self.name} printed {line[:200]!r} instead of a ready line") from None
        return document

    async def _poll_probe(self) -> dict[str, Any]:
        process = self._process
        assert process is not None
        assert self.probe is not None
        while True:
            if process.returncode is not None or process.poll() is not None:
                raise self._exited_early(process.returncode)
            if await self.probe():
                return {}
            await trio.sleep(0.05)  # another process's port: there is no event to wait on

    def _exited_early(self, code: int | None) -> ProcessStartError:
        return ProcessStartError(
            f"{self.name} exited with code {code} before it was ready:\n{self.log_tail()}"
        )

    async def watch(self, on_unexpected_exit: Callable[[ManagedProcess], None]) -> None:
        """Wait for this run of the process to end; report it unless it was stopped or killed on purpose."""
        process = self._process
        if process is None:
            return
        await process.wait()
        self.exited.set()
        if not self._stopping and process is self._process:
            on_unexpected_exit(self)

    async def stop(self) -> int | None:
        """SIGCONT, SIGTERM, wait ``stop_timeout_s``, then SIGKILL; returns the exit code."""
        process = self._process
        if process is None:
            return None
        self._stopping = True
        if process.returncode is None:
            self.resume()  # a paused process cannot act on SIGTERM
            self._signal(signal.SIGTERM)
            with trio.move_on_after(self.stop_timeout_s):
                await process.wait()
            if process.returncode is None:
                log.warning("%s (pid %d) ignored SIGTERM for %.0f s: SIGKILL", self.name, process.pid,
                            self.stop_timeout_s)  # fmt: skip
                self._signal(signal.SIGKILL)
                await process.wait()
        await self._close_pipes()
        return process.returncode

    async def kill(self) -> None:
        """SIGKILL (a crash: no chance to clean up) and wait for the exit."""
        self._stopping = True
        await self._kill_quietly()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but does nothing (a hung process, a long GC pause)."""
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        self.paused = False

    def _signal(self, signum: int) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signum)

    async def _kill_quietly(self) -> None:
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            self._signal(signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await process.wait()
        await self._close_pipes()

    async def _close_pipes(self) -> None:
        process = self._process
        if process is not None and process.stdout is not None:
            with trio.CancelScope(shield=True):
                await process.stdout.aclose()
