"""Opening a server's listening sockets, with an error that says which server, which port and which setting.

``trio.open_tcp_listeners`` fails with the operating system's words: ``OSError: [Errno 98] Address already in
use`` names neither the port nor the server that wanted it, and a process runs several servers (the broker's
HTTP and HTTPS ports, a bookie's protocol and HTTP ports, a standalone's bookies). :func:`open_listeners`
raises :class:`ListenError` instead: the server (``service``), the address and port, the reason in plain
words, and ``setting`` - the name of the setting that chose the port (or the bind address), so the process
that reports it can tell the user which flag or ``MAGNETAR_*`` variable changes it. A port in use also names
the process that holds it when it can be found (:mod:`.port_holder`).

:func:`check_ports_free` binds and releases ports before a process writes anything it would have to take
back if a port then failed (a bookie's identity in its directories and in the metadata store): a taken port
fails the start before any state is written. Another process can still take a port between the check and
the real bind; the real bind then fails with the same error, and nothing is lost but that precaution.
"""

from __future__ import annotations

import errno
import socket

import trio

from magnetar.bookkeeper.runtime.port_holder import port_holder

_REASONS = {
    errno.EADDRINUSE: "the port is already in use",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's",
}


class ListenError(OSError):
    """A server could not listen: ``str()`` names the server, the address and the reason."""

    def __init__(
        self,
        service: str,
        host: str,
        port: int,
        setting: str,
        cause: OSError,
        *,
        note: str = "",
        holder: str = "",
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
        self.holder = holder
        """Which process holds the port (``by pid 123 (magnetar bookie ...)``), when known."""

    def __str__(self) -> str:
        if isinstance(self.cause, socket.gaierror):
            return f"{self.service} cannot listen: address {self.host!r} does not resolve ({self.strerror})"
        reason = _REASONS.get(self.errno or 0, self.strerror or str(self.cause))
        text = f"{self.service} cannot listen on {self.host}:{self.port}: {reason}"
        if self.errno == errno.EADDRINUSE:
            text = f"{text} {self.holder or 'by another process'}"
        text = f"{text} [errno {self.errno}]"
        return f"{text} ({self.note})" if self.note else text

    def renamed(self, service: str, setting: str, note: str = "") -> ListenError:
        """The same failure, as the process that derived the port names it (its own setting and server)."""
        return ListenError(service, self.host, self.port, setting, self.cause, note=note, holder=self.holder)


async def open_listeners(port: int, host: str, *, service: str, setting: str) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners(port, host=host)``, raising :class:`ListenError` when it cannot listen.

    ``setting`` names the setting that chose ``port``; a bind address that does not resolve is reported as
    the ``bind_address`` setting's fault."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except socket.gaierror as exc:
        raise ListenError(service, host, port, "bind_address", exc) from exc
    except OSError as exc:
        holder = ""
        if exc.errno == errno.EADDRINUSE and port:
            found = await trio.to_thread.run_sync(port_holder, port)
            holder = found.describe() if found is not None else ""
        raise ListenError(service, host, port, setting, exc, holder=holder) from exc


async def check_ports_free(ports: list[tuple[int, str, str, str]]) -> None:
    """Bind and release each ``(port, host, service, setting)`` (port 0 is skipped: any free port will do);
    :class:`ListenError` for the first that cannot be bound (see the module docstring)."""
    for port, host, service, setting in ports:
        if not port:
            continue
        for listener in await open_listeners(port, host, service=service, setting=setting):
            await listener.aclose()
