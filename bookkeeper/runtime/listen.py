"""Opening a server's listening sockets, with an error that says which server, which port and which setting.

``trio.open_tcp_listeners`` fails with the operating system's words: ``OSError: [Errno 98] Address already in
use`` names neither the port nor the server that wanted it, and a process runs several servers (the broker's
HTTP and HTTPS ports, a bookie's protocol and HTTP ports, a standalone's bookies). :func:`open_listeners`
raises :class:`ListenError` instead: the server (``service``), the address and port, the reason in plain
words, and ``setting`` - the name of the setting that chose the port (or the bind address), so the process
that reports it can tell the user which flag or ``MAGNETAR_*`` variable changes it.
"""

from __future__ import annotations

import errno
import socket

import trio

_REASONS = {
    errno.EADDRINUSE: "the port is already in use by another process",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's",
}


class ListenError(OSError):
    """A server could not listen: ``str()`` names the server, the address and the reason."""

    def __init__(
        self, service: str, host: str, port: int, setting: str, cause: OSError, *, note: str = ""
    ) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.service = service
        """The server, as a user knows it (``broker HTTP``, ``bookie protocol``)."""
        self.host = host
        self.port = port
        self.setting = setting
        """The name of the setting that chose what failed (``http_port``, or ``bind_address``)."""
        self.note = note
        """Anything else the user should know (how a derived port was computed)."""
        self.cause = cause

    def __str__(self) -> str:
        if isinstance(self.cause, socket.gaierror):
            return f"{self.service} cannot listen: address {self.host!r} does not resolve ({self.strerror})"
        reason = _REASONS.get(self.errno or 0, self.strerror or str(self.cause))
        text = f"{self.service} cannot listen on {self.host}:{self.port}: {reason} [errno {self.errno}]"
        return f"{text} ({self.note})" if self.note else text

    def renamed(self, service: str, setting: str, note: str = "") -> ListenError:
        """The same failure, as the process that derived the port names it (its own setting and server)."""
        return ListenError(service, self.host, self.port, setting, self.cause, note=note)


async def open_listeners(port: int, host: str, *, service: str, setting: str) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners(port, host=host)``, raising :class:`ListenError` when it cannot listen.

    ``setting`` names the setting that chose ``port``; a bind address that does not resolve is reported as
    the ``bind_address`` setting's fault."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except socket.gaierror as exc:
        raise ListenError(service, host, port, "bind_address", exc) from exc
    except OSError as exc:
        raise ListenError(service, host, port, setting, exc) from exc
