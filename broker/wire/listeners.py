"""Advertised listeners (Pulsar's ``advertisedListeners`` and ``internalListenerName``): named addresses of a
broker's binary protocol, one per network its clients come from.

The setting ``advertised_listeners`` is Pulsar's text, ``name:pulsar://host:port,name:pulsar+ssl://host:port``:
each name has at most one ``pulsar://`` and one ``pulsar+ssl://`` URL. The listeners go into the broker's
registration (its ownership records and load reports, :mod:`magnetar.broker.ownership`, as Pulsar's
``advertisedListeners`` of ``NamespaceEphemeralData``), so that any broker answers a lookup for a topic
another one owns with the owner's address on the listener the client named (LOOKUP's
``advertised_listener_name``, the HTTP lookup's ``listenerName`` parameter or ``X-Pulsar-ListenerName``
header). A name the owner does not have is refused
(binary: ``ServiceNotReady``; HTTP: 500; "the broker do not have <name> listener"), as Pulsar refuses it.
With listeners set, the broker's own binary URLs (what a lookup naming no listener answers) are those of the
internal listener (``internal_listener_name``, default the first one named), as Pulsar's.

Bounds: :data:`LISTENERS_MAX` names, names of :data:`LISTENER_NAME_CHARS_MAX` characters from
``[A-Za-z0-9_.-]``, URLs of :data:`LISTENER_URL_CHARS_MAX` characters; a registration record read from the
metadata store is held to the same bounds (what does not fit is dropped, never trusted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LISTENERS_MAX = 16
"""Listener names one broker may advertise."""
LISTENER_NAME_CHARS_MAX = 64
LISTENER_URL_CHARS_MAX = 256
ADVERTISED_LISTENERS_CHARS_MAX = 2 * LISTENERS_MAX * (LISTENER_NAME_CHARS_MAX + LISTENER_URL_CHARS_MAX + 2)
"""Length of the whole setting: every name with both URLs at their longest."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")
_SCHEMES = {"pulsar": False, "pulsar+ssl": True}
"""URL scheme -> whether it is the TLS one."""


@dataclass(frozen=True, slots=True)
class AdvertisedListener:
    """One named listener: its ``pulsar://`` URL and its ``pulsar+ssl://`` URL ("" where it has none)."""

    name: str
    url: str = ""
    url_tls: str = ""


def parse_advertised_listeners(
    text: str, setting: str = "advertised_listeners"
) -> tuple[AdvertisedListener, ...]:
    """The listeners of ``text`` (Pulsar's format) in the order first named; :class:`ValueError` naming
    ``setting`` and the fault otherwise."""
    if not text.strip():
        return ()
    urls: dict[str, dict[bool, str]] = {}
    for raw in text.split(","):
        item = raw.strip()
        name, sep, url = item.partition(":")
        if not sep or not url:
            raise ValueError(f"{setting}: {shown_name(item)} is not name:pulsar://host:port")
        check_listener_name(name, setting)
        tls = _check_url(url, setting)
        listener = urls.setdefault(name, {})
        if tls in listener:
            kind = "pulsar+ssl://" if tls else "pulsar://"
            raise ValueError(f"{setting}: listener {name} has more than one {kind} URL")
        listener[tls] = url
        if len(urls) > LISTENERS_MAX:
            raise ValueError(f"{setting}: more than {LISTENERS_MAX} listener names")
    return tuple(AdvertisedListener(name, u.get(False, ""), u.get(True, "")) for name, u in urls.items())


def check_listener_name(name: str, setting: str) -> None:
    if not name or len(name) > LISTENER_NAME_CHARS_MAX or not _NAME.fullmatch(name):
        raise ValueError(
            f"{setting}: listener name {shown_name(name)} is not 1 to {LISTENER_NAME_CHARS_MAX} "
            "characters of A-Z, a-z, 0-9, '_', '.', '-' (starting with a letter or digit)"
        )


def _check_url(url: str, setting: str) -> bool:
    """Whether ``url`` is the TLS kind, once it is a valid ``pulsar[+ssl]://host:port``."""
    scheme, sep, rest = url.partition("://")
    host, colon, port = rest.rpartition(":")
    if (
        len(url) > LISTENER_URL_CHARS_MAX
        or not sep
        or scheme not in _SCHEMES
        or not colon
        or not _HOST.fullmatch(host)
        or not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535)
    ):
        raise ValueError(
            f"{setting}: {shown_name(url)} is not a pulsar://host:port or pulsar+ssl://host:port URL "
            f"(port 1-65535, at most {LISTENER_URL_CHARS_MAX} characters)"
        )
    return _SCHEMES[scheme]


def listener_named(listeners: tuple[AdvertisedListener, ...], name: str) -> AdvertisedListener | None:
    return next((listener for listener in listeners if listener.name == name), None)


def unknown_listener(name: str) -> str:
    """Pulsar's refusal of a lookup naming a listener the owner does not have (the name shown escaped)."""
    return f"the broker do not have {shown_name(name)} listener"


def listeners_json(listeners: tuple[AdvertisedListener, ...]) -> dict[str, dict[str, str]]:
    """Pulsar's ``advertisedListeners`` map of a registration: name -> brokerServiceUrl(Tls)."""
    return {
        listener.name: {"brokerServiceUrl": listener.url, "brokerServiceUrlTls": listener.url_tls}
        for listener in listeners
    }


def listeners_from_json(data: Any) -> tuple[AdvertisedListener, ...]:
    """The listeners of a registration record as stored (another broker wrote it): what is not a bounded
    name with string URLs is dropped."""
    if not isinstance(data, dict):
        return ()
    out: list[AdvertisedListener] = []
    for name, urls in list(data.items())[:LISTENERS_MAX]:
        if not isinstance(urls, dict) or not isinstance(name, str):
            continue
        url, url_tls = urls.get("brokerServiceUrl", ""), urls.get("brokerServiceUrlTls", "")
        if (
            len(name) <= LISTENER_NAME_CHARS_MAX
            and _NAME.fullmatch(name)
            and all(isinstance(u, str) and len(u) <= LISTENER_URL_CHARS_MAX for u in (url, url_tls))
        ):
            out.append(AdvertisedListener(name, url, url_tls))
    return tuple(out)


def shown_name(text: str) -> str:
    """``text`` (a setting's, or a listener name a client sent) for an error message or a log line: escaped
    (control and bidi characters visible) and cut short."""
    if text and len(text) <= LISTENER_NAME_CHARS_MAX and text.isascii() and text.isprintable():
        return text
    return ascii(text if len(text) <= LISTENER_NAME_CHARS_MAX else f"{text[:LISTENER_NAME_CHARS_MAX]}...")
