"""The comparison's process handling: what a killed supervisor left running is killed by pid, nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from bench.comparison.processes import kill_leftovers

SLEEPER = "import time; time.sleep(60)"


def start(*args: str) -> subprocess.Popen[bytes]:
    """A process in its own session, as ``magnetar dev-cluster`` starts its components."""
    return subprocess.Popen([sys.executable, "-c", SLEEPER, *args], start_new_session=True)


def test_a_component_that_outlived_its_supervisor_is_killed_and_anything_else_is_left_alone() -> None:
    component = start("-m", "magnetar.admin.cli", "bookie")  # what a bookie's command line holds
    stranger = start("unrelated")  # a pid the kernel could have handed to another program since
    try:
        assert kill_leftovers("test", [component.pid, stranger.pid]) == [component.pid]
        assert component.wait(timeout=5) == -signal.SIGKILL
        assert stranger.poll() is None
        assert kill_leftovers("test", [component.pid]) == []  # reaped: nothing left to kill
    finally:
        for process in (component, stranger):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
