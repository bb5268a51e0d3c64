"""File descriptors: what client connections may use, and what stays for storage and metadata.

Theory of operation. Every accepted connection costs a descriptor, and so does every journal file, entry
log, index file, ZooKeeper session and bookie connection. When clients take them all - about 1,000 idle
connections under ``ulimit -n 1024`` - the journal cannot open its next file and every write fails. So:

* at start, :func:`raise_nofile_limit` raises the soft ``RLIMIT_NOFILE`` to the hard limit (the kernel lets
  any process do that) and logs what it did;
* :data:`STORAGE_RESERVE` descriptors are kept for storage, metadata and the refusal of excess connections;
  client connections of all HTTP/WebSocket servers of the process together get at most ``RLIMIT_NOFILE -
  STORAGE_RESERVE`` (:class:`ConnectionSlots`, one per process); a connection beyond that is answered 503
  like one beyond ``http_connections_max``, so accepting stops before storage starves;
* :func:`check_connection_limits` tells, at start, when the settings ask for more connections than the
  descriptors allow, naming the setting and the ``ulimit``.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

STORAGE_RESERVE = 256
"""Descriptors never given to client connections: journal and entry-log files, index databases, ZooKeeper,
bookie and broker-to-broker connections, the refusals in flight (at most 32)."""
CONNECTIONS_MIN = 64
"""Connections allowed however low the limit (a limit under ``STORAGE_RESERVE + 64`` is reported)."""


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one where allowed; the (soft, hard) limits now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit (ulimit -n) from %d to %d: %s", soft, hard, exc)
        else:
            log.info("raised the open-files limit (ulimit -n) from %d to its hard limit %d", soft, hard)
            soft = hard
    return soft, hard


def connections_allowed() -> int:
    """Client connections the process may hold: the open-files limit less :data:`STORAGE_RESERVE`."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 62
    return max(CONNECTIONS_MIN, soft - STORAGE_RESERVE)


def check_connection_limits(
    connections_max: int, servers: int = 1, setting: str = "http_connections_max"
) -> str:
    """A warning when ``servers`` servers of ``connections_max`` connections each ask for more descriptors
    than the process has (naming the setting and the ulimit); "" when they fit. Logged as well."""
    allowed = connections_allowed()
    wanted = connections_max * servers
    if wanted <= allowed:
        return ""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    message = (
        f"{setting}={connections_max} x {servers} port(s) needs more file descriptors than the open-files "
        f"limit allows (ulimit -n {soft}, hard limit {hard}, {STORAGE_RESERVE} kept for storage): at most "
        f"{allowed} client connections will be accepted; raise ulimit -n to {wanted + STORAGE_RESERVE} "
        f"or lower {setting}"
    )
    log.warning("%s", message)
    return message


class ConnectionSlots:
    """The client connections of every server of the process, bounded by :func:`connections_allowed`."""

    def __init__(self) -> None:
        self.taken = 0

    def try_take(self) -> bool:
        if self.taken >= connections_allowed():
            return False
        self.taken += 1
        return True

    def give_back(self) -> None:
        self.taken -= 1


_SLOTS = ConnectionSlots()


def process_connection_slots() -> ConnectionSlots:
    return _SLOTS
