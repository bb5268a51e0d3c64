"""Which process holds a TCP port: what a "port already in use" error can tell the user besides the port.

Theory of operation (Linux). ``/proc/net/tcp`` and ``/proc/net/tcp6`` list the machine's TCP sockets, one a
line: ``sl local_address rem_address st ... uid timeout inode``, the local address as hex ``ADDR:PORT`` and
the state as hex (``0A`` is LISTEN). :func:`listening_inodes` parses that text (no I/O) into the inodes of
the sockets listening on a port; :func:`port_holder` then looks for a process with a descriptor linked to
``socket:[<inode>]`` under ``/proc/<pid>/fd``. Only processes the caller may inspect (its own user's, or all
of them for root) can be found; anything unreadable is skipped, and the answer is None when nothing is
found (another system, another user's process, a socket in another network namespace). It runs once, when
a port could not be bound, never on a request path; the scan stops after :data:`PROCESSES_MAX` processes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

LISTEN_STATE = "0A"
PROCESSES_MAX = 100_000
COMMAND_CHARS_MAX = 160


@dataclass(frozen=True, slots=True)
class PortHolder:
    pid: int
    command: str
    """Its command line, arguments separated by spaces, at most :data:`COMMAND_CHARS_MAX` characters."""

    def describe(self) -> str:
        if self.pid == os.getpid():
            return f"by this process itself (pid {self.pid}): two of its servers were given the same port"
        return f"by pid {self.pid} ({self.command})" if self.command else f"by pid {self.pid}"


def listening_inodes(table: str, port: int) -> set[str]:
    """The inodes of the sockets listening on ``port`` in the text of ``/proc/net/tcp`` (or ``tcp6``)."""
    inodes = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN_STATE:
            continue
        _, _, hex_port = fields[1].rpartition(":")
        try:
            if int(hex_port, 16) == port and fields[9] != "0":
                inodes.add(fields[9])
        except ValueError:
            continue
    return inodes


def port_holder(port: int, proc: str = "/proc") -> PortHolder | None:
    """The process listening on ``port`` (see the module docstring), or None when it cannot be found."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", name)) as table:
                inodes |= listening_inodes(table.read(), port)
        except OSError:
            continue
    if not inodes:
        return None
    links = {f"socket:[{inode}]" for inode in inodes}
    for pid in _pids(proc):
        if _holds(os.path.join(proc, str(pid), "fd"), links):
            return PortHolder(pid, _command(os.path.join(proc, str(pid), "cmdline")))
    return None


def _pids(proc: str) -> Iterable[int]:
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    return [int(name) for name in names if name.isascii() and name.isdigit()][:PROCESSES_MAX]


def _holds(fd_dir: str, links: set[str]) -> bool:
    try:
        descriptors = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in descriptors:
        try:
            if os.readlink(os.path.join(fd_dir, fd)) in links:
                return True
        except OSError:
            continue
    return False


def _command(path: str) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(COMMAND_CHARS_MAX * 4)
    except OSError:
        return ""
    text = raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()
    printable = "".join(ch if ch.isprintable() else "?" for ch in text)
    return printable[:COMMAND_CHARS_MAX]
