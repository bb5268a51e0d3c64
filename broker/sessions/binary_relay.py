"""Relaying a Pulsar binary connection to the broker that owns its topics, for clients that can reach one
address only (a Kubernetes Service, a load balancer in front of the brokers).

Pulsar's clients look a topic up, then connect to the owner the answer names. A client that can reach only
its service address cannot: the owner's address (a pod's IP) is not routable from where it runs. Pulsar's
answer is its proxy, and the binary protocol carries it: a lookup answered with ``proxy_through_service_url``
tells the client to keep connecting to its service address and to name the owner in CONNECT's
``proxy_to_broker_url``. With ``binary_proxy_enabled`` every Magnetar broker plays that proxy:

* its lookups name the owner with ``proxy_through_service_url`` set (the binary front door);
* a CONNECT naming another broker is **authenticated here first**, as a connection served here would be (a
  client that fails gets ``AuthenticationError`` from this broker, and nothing reaches the owner), then
  relayed: this broker opens a connection to the owner - only to an address a live broker of the cluster
  registered, never to one the client made up - sends the client's CONNECT as received (its own credentials:
  the owner authenticates and authorizes the client's role again, so the hop never lets a client do more
  than it could on the owner directly, and no broker role needs rights on tenants' topics) and from then on
  copies bytes both ways unchanged. The owner does all the protocol work, keepalive and token refresh
  included; this broker sends nothing of its own on a relayed connection.

Limits: ``binary_proxy_connections_max`` relayed connections at once (a CONNECT beyond it is answered
``ServiceNotReady`` naming the setting), ``binary_proxy_connect_timeout_ms`` to reach the owner (TCP and
TLS; beyond it ``ServiceNotReady`` naming the owner), copies of at most :data:`CHUNK_BYTES` at a time with
TCP's back-pressure in both directions (a side that does not read stops the other side being read). When
either side closes, the other is closed too. The owner sees the relaying broker's address as the client's.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import trio

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
"""The most one copy step reads from a side before writing it to the other."""
LIVE_URLS_TTL_S = 5.0
"""How long the live brokers' addresses, once read from the metadata store, serve relayed CONNECTs (a broker
that joined meanwhile is relayed to at most this much later)."""


class RelayRefused(Exception):
    """The connection cannot be relayed; the message says why, for the client's ERROR."""


def broker_address(url: str) -> str:
    """``host:port`` of a broker's binary URL (``pulsar://host:port``, ``pulsar+ssl://host:port``); what
    clients put in ``proxy_to_broker_url`` (the C++ client sends ``host:port``, without the scheme) comes
    back unchanged."""
    return url.split("://", 1)[1] if "://" in url else url


@dataclass(frozen=True, slots=True)
class RelayTarget:
    """A live broker's binary address, as it registered it: ``pulsar://host:port`` or ``pulsar+ssl://...``."""

    url: str
    host: str
    port: int
    tls: bool

    @classmethod
    def among(cls, named: str, live_urls: Mapping[str, str]) -> RelayTarget:
        """The live broker ``named`` (a URL it registered, an advertised listener's included, or its
        ``host:port``) names, as the address to dial (``live_urls[url]``: the broker's own URL of that kind);
        :class:`RelayRefused` for anything else - the relay never dials an address no broker of the cluster
        registered."""
        wanted = broker_address(named)
        scheme = named.split("://", 1)[0] if "://" in named else None
        for url in sorted(live_urls):
            if scheme is not None and scheme not in ("pulsar", "pulsar+ssl"):
                break
            parts = urlsplit(live_urls[url])
            if broker_address(url) == wanted and parts.hostname and parts.port is not None:
                return cls(live_urls[url], parts.hostname, parts.port, parts.scheme == "pulsar+ssl")
        raise RelayRefused(f"proxy_to_broker_url {named[:200]!r} is not a live broker of this cluster")


class BinaryRelay:
    """The relayed connections of one broker (see the module docstring)."""

    def __init__(
        self, *, connections_max: int, connect_timeout_s: float, ssl_context: ssl.SSLContext | None
    ) -> None:
        self._connections_max = connections_max
        self._connect_timeout_s = connect_timeout_s
        self._ssl_context = ssl_context
        self.connections = 0
        """Relayed connections open now."""
        self.relayed_total = 0
        """Connections relayed since the broker started."""

    async def open(self, target: RelayTarget) -> trio.abc.Stream:
        """A connection to ``target`` (TLS for ``pulsar+ssl``), within the connect timeout. It counts as
        relayed from here (so connects in progress count against the bound too) until :meth:`relay` ends;
        hand it to :meth:`relay` at once."""
        if self.connections >= self._connections_max:
            raise RelayRefused(
                f"this broker relays binary_proxy_connections_max={self._connections_max} connections already"
            )
        self.connections += 1
        stream: trio.abc.Stream | None = None
        try:
            with trio.fail_after(self._connect_timeout_s):
                stream = await trio.open_tcp_stream(target.host, target.port)
                if target.tls:
                    if self._ssl_context is None:
                        raise RelayRefused(f"{target.url} serves TLS only and this broker has no TLS client")
                    tls = trio.SSLStream(stream, self._ssl_context, server_hostname=target.host)
                    await tls.do_handshake()
                    stream = tls
            return stream
        except BaseException as exc:
            self.connections -= 1
            if stream is not None:
                await trio.aclose_forcefully(stream)
            if not isinstance(exc, OSError | trio.TooSlowError | trio.BrokenResourceError | ssl.SSLError):
                raise
            timeout_ms = round(self._connect_timeout_s * 1000)
            reason = "no answer" if isinstance(exc, trio.TooSlowError) else str(exc) or type(exc).__name__
            raise RelayRefused(
                f"could not reach the owner {target.url} (binary_proxy_connect_timeout_ms={timeout_ms}): "
                f"{reason}"
            ) from None

    async def relay(self, client: trio.abc.Stream, owner: trio.abc.Stream, first: bytes) -> None:
        """Send ``first`` (the client's CONNECT and whatever followed it) to the owner (a stream
        :meth:`open` gave), then copy both ways until either side closes; closes ``owner``."""
        self.relayed_total += 1
        try:
            await owner.send_all(first)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_copy, client, owner, nursery.cancel_scope)
                nursery.start_soon(_copy, owner, client, nursery.cancel_scope)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.connections -= 1
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await owner.aclose()


async def _copy(source: trio.abc.Stream, sink: trio.abc.Stream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(CHUNK_BYTES):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError):
        pass
    finally:
        done.cancel()
