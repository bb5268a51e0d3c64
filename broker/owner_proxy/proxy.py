"""The broker's owner proxy: serves a WebSocket session whose topic another broker owns (see the package's
docstring for the design), within ``ws_proxy_sessions_max`` upstream sessions - on a partitioned topic, one
per partition (:mod:`.fanout`)."""

from __future__ import annotations

import ipaddress
import logging
import ssl
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context
from magnetar.bookkeeper.runtime.http import (
    WebSocketRequest,
    WsClient,
    WsRejected,
    error_response,
    open_ws_client,
)
from magnetar.broker.core import PartitionRouter, ServiceError
from magnetar.broker.owner_proxy.fanout import FanOutSession
from magnetar.broker.owner_proxy.metrics import ProxyCounters, ProxyMetrics
from magnetar.broker.owner_proxy.relay import (
    OPEN_FINAL_STATUSES,
    Connect,
    GaveUp,
    LookupFailed,
    Relay,
    connect_with_retry,
)
from magnetar.broker.owner_proxy.upstream import client_credentials, upstream_target
from magnetar.broker.protocols.adapter import ProtocolAdapter
from magnetar.broker.protocols.fan import Fan
from magnetar.broker.protocols.params import ProducerParams, WsKind
from magnetar.broker.protocols.relay_tracking import Tracker
from magnetar.broker.wire import TopicName

if TYPE_CHECKING:
    from magnetar.broker.owner_proxy.host import ProxyHost

log = logging.getLogger(__name__)

PROXIED_BY_HEADER = "x-magnetar-proxied-by"
"""Marks an upstream session: the broker receiving it serves the topic itself or refuses (307), never
proxies again (no chains, no loops)."""


class OwnerProxy:
    def __init__(self, service: ProxyHost) -> None:
        self._service = service
        self._settings = service.settings
        self.counters = ProxyCounters()
        self.metrics = ProxyMetrics(service.settings.cluster, self.counters)
        """The proxy's ``/metrics`` families (:mod:`.metrics`), added by the broker's HTTP application."""
        self._ssl_context: ssl.SSLContext | None = None
        self._prepared = False

    def proxies(self, request: WebSocketRequest) -> bool:
        """Whether a session this broker cannot serve itself is proxied (else: 307 to the owner)."""
        return self._settings.ws_proxy_enabled and request.head.header(PROXIED_BY_HEADER) is None

    def _prepare(self) -> None:
        """Build the TLS context of the upstream sessions once."""
        if self._prepared:
            return
        settings = self._settings
        trust = settings.broker_client_tls_trust_certs_file or settings.tls_trust_certs_file
        self._ssl_context = client_ssl_context(
            trust_certs_file=trust, check_hostname=settings.broker_client_tls_hostname_verification
        )
        self._prepared = True

    def _origin(self, http_url: str, http_url_tls: str) -> str:
        """The owner's ``ws://host:port`` (``wss://`` for its TLS port)."""
        if http_url_tls and (self._settings.broker_client_tls_enabled or not http_url):
            base = "wss://" + http_url_tls.split("://", 1)[-1]
        else:
            base = "ws://" + http_url.split("://", 1)[-1]
        return base.rstrip("/")

    async def serve(
        self,
        request: WebSocketRequest,
        kind: WsKind,
        adapter: ProtocolAdapter,
        topic: TopicName,
        http_url: str,
        http_url_tls: str,
    ) -> None:
        """Open the session on the owner (``http_url`` first, then wherever lookups say), accept the client
        with the subprotocol the owner chose and relay until either side ends it. A refusal by the owner is
        passed to the client as it is (status and reason); an owner unreachable within the deadline is 503.
        ``adapter`` is the session's protocol (the one the owner chooses from the same subprotocols): it
        gives the trackers (:meth:`~magnetar.broker.protocols.adapter.ProtocolAdapter.relay_tracker`)."""
        if await self._admit(request, 1):
            try:
                await self._serve(request, kind, adapter, topic, http_url, http_url_tls)
            finally:
                self._release(1)

    async def serve_partitioned(
        self,
        request: WebSocketRequest,
        kind: WsKind,
        adapter: ProtocolAdapter,
        topic: TopicName,
        partitions: int,
    ) -> None:
        """Serve a session on a partitioned topic through one upstream session per partition, each on the
        partition's owner (this broker included: a loopback session), fanned out and in (:mod:`.fanout`).
        Holds one of ``ws_proxy_sessions_max`` per partition (each is a connection to an owner); counts once
        in the sessions metric. The first refusal by an owner is passed to the client as
        it is; a partition unreachable within the deadline is 503."""
        if await self._admit(request, partitions):
            try:
                await self._serve_partitioned(request, kind, adapter, topic, partitions)
            finally:
                self._release(partitions)

    async def _admit(self, request: WebSocketRequest, upstreams: int) -> bool:
        """Take ``upstreams`` of the ``ws_proxy_sessions_max`` upstream sessions, or answer 503."""
        bound = self._settings.ws_proxy_sessions_max
        counters = self.counters
        if counters.upstreams + upstreams > bound:
            reason = (
                f"Too many proxied sessions on this broker: {counters.upstreams} upstream sessions held, "
                f"{upstreams} more needed (ws_proxy_sessions_max={bound})"
            )
            counters.sessions_refused += 1
            await request.reject(error_response(503, reason))
            return False
        counters.upstreams += upstreams
        counters.sessions += 1
        return True

    def _release(self, upstreams: int) -> None:
        self.counters.upstreams -= upstreams
        self.counters.sessions -= 1

    async def _serve(
        self,
        request: WebSocketRequest,
        kind: WsKind,
        adapter: ProtocolAdapter,
        topic: TopicName,
        http_url: str,
        http_url_tls: str,
    ) -> None:
        self._prepare()
        first = [(http_url, http_url_tls)]

        async def connect(overrides: dict[str, str]) -> WsClient:
            if first:
                owner_url, owner_url_tls = first.pop()
            else:
                try:
                    owner = (await self._service.lookup(topic)).owner
                except ServiceError as exc:
                    raise LookupFailed(f"lookup of {topic}: {exc}") from None
                owner_url, owner_url_tls = owner.httpUrl, owner.httpUrlTls
            return await self._open(request, owner_url, owner_url_tls, overrides)

        try:
            upstream = await connect_with_retry(
                connect, dict, self._settings, str(topic), final_statuses=OPEN_FINAL_STATUSES
            )
        except WsRejected as exc:
            await request.reject(error_response(exc.status, exc.reason))
            return
        except GaveUp as exc:
            self.counters.sessions_refused += 1
            await request.reject(error_response(503, str(exc)))
            return
        try:
            ws = await request.accept(upstream.subprotocol)
        except BaseException:
            with trio.CancelScope(shield=True):
                await upstream.aclose()
            raise
        log.info("proxy: %s %s session from %s served through %s", topic, kind.value, request.client,
                 upstream.peer)  # fmt: skip
        self.counters.sessions_opened += 1
        tracker = _tracker(request, kind, adapter)
        relay = Relay(ws, upstream, tracker, connect, self._settings, str(topic), self.counters)
        await relay.run()

    async def _serve_partitioned(
        self,
        request: WebSocketRequest,
        kind: WsKind,
        adapter: ProtocolAdapter,
        topic: TopicName,
        partitions: int,
    ) -> None:
        self._prepare()

        def connector(index: int) -> Connect:
            partition = topic.partition(index)
            path = _partition_path(request.head.path, kind, index)

            async def connect(overrides: dict[str, str]) -> WsClient:
                try:
                    owner = (await self._service.lookup(partition)).owner
                except ServiceError as exc:
                    raise LookupFailed(f"lookup of {partition}: {exc}") from None
                return await self._open(request, owner.httpUrl, owner.httpUrlTls, overrides, path)

            return connect

        connects = [connector(index) for index in range(partitions)]
        upstreams: list[WsClient | None] = [None] * partitions
        failures: list[BaseException] = []

        limiter = trio.CapacityLimiter(self._settings.ws_proxy_partition_opens_max)

        async def open_one(index: int, cancel: trio.CancelScope) -> None:
            try:
                async with limiter:
                    upstreams[index] = await connect_with_retry(
                        connects[index],
                        dict,
                        self._settings,
                        str(topic.partition(index)),
                        final_statuses=OPEN_FINAL_STATUSES,
                    )
            except (WsRejected, GaveUp) as exc:
                failures.append(exc)
                cancel.cancel()  # the first refusal answers the client: stop opening the others

        try:
            async with trio.open_nursery() as nursery:
                for index in range(partitions):
                    nursery.start_soon(open_one, index, nursery.cancel_scope)
        except BaseException:
            await _close_all(upstreams)
            raise
        opened = [upstream for upstream in upstreams if upstream is not None]
        if failures or len(opened) != partitions:
            await _close_all(upstreams)
            failure = failures[0] if failures else GaveUp(f"{topic}: a partition's owner is unreachable")
            if isinstance(failure, WsRejected):
                await request.reject(error_response(failure.status, failure.reason))
            else:
                self.counters.sessions_refused += 1
                await request.reject(error_response(503, str(failure)))
            return
        subprotocol = opened[0].subprotocol
        try:
            ws = await request.accept(subprotocol)
        except BaseException:
            await _close_all(upstreams)
            raise
        log.info("proxy: %s %s session from %s served through %d partition sessions", topic, kind.value,
                 request.client, partitions)  # fmt: skip
        self.counters.sessions_opened += 1
        trackers = [_tracker(request, kind, adapter) for _ in range(partitions)]
        session = FanOutSession(
            ws,
            self._fan(request, kind, adapter, partitions),
            opened,
            trackers,
            connects,
            self._settings,
            str(topic),
            self.counters,
        )
        await session.run()

    def _fan(
        self,
        request: WebSocketRequest,
        kind: WsKind,
        adapter: ProtocolAdapter,
        partitions: int,
    ) -> Fan:
        if kind is WsKind.PRODUCER:
            params = ProducerParams.parse(request.query)  # checked before the session came to the proxy
            router = PartitionRouter(
                list(range(partitions)),
                routing_mode=params.message_routing_mode,
                hashing_scheme=params.hashing_scheme,
                rng=self._service.rng,
            )
            return adapter.producer_fan(router)
        pull_mode = kind is WsKind.CONSUMER and request.query.get("pullMode", "false").lower() == "true"
        return adapter.consumer_fan(
            partitions,
            pull_mode=pull_mode,
            reader=kind is WsKind.READER,
            prefetch=self._settings.ws_proxy_partition_prefetch_messages,
        )

    async def _open(
        self,
        request: WebSocketRequest,
        http_url: str,
        http_url_tls: str,
        overrides: dict[str, str],
        path: str | None = None,
    ) -> WsClient:
        url = self._origin(http_url, http_url_tls)
        target = upstream_target(path or request.head.path, request.head.target, overrides)
        headers = [(PROXIED_BY_HEADER, self._service.http_url), *client_credentials(request.head)]
        return await open_ws_client(
            url,
            target=target,
            headers=headers,
            subprotocols=request.subprotocols,
            ssl_context=self._ssl_context if url.startswith("wss://") else None,
            redirects_max=self._settings.ws_proxy_redirects_max,
            message_bytes_max=self._settings.http.ws_frame_bytes_max,
            local_address=hop_source(self._settings.bind_address),
        )


def hop_source(bind_address: str) -> str | None:
    """The address upstream sessions leave from: the broker's bind address when it is one specific IP
    address, so that the owner sees a connection from the address this broker listens on (and, as a rule,
    advertises: :mod:`magnetar.broker.ownership.peer_addresses` recognizes peers by it); else the system's
    choice."""
    try:
        address = ipaddress.ip_address(bind_address)
    except ValueError:
        return None
    return None if address.is_unspecified else str(address)


def _tracker(request: WebSocketRequest, kind: WsKind, adapter: ProtocolAdapter) -> Tracker:
    """The session's tracker, from its protocol's adapter: the proxy knows no protocol's frames."""
    pull_mode = request.query.get("pullMode", "false").lower() == "true"
    return adapter.relay_tracker(
        producer=kind is WsKind.PRODUCER, pull_mode=pull_mode, reader=kind is WsKind.READER
    )


def _partition_path(path: str, kind: WsKind, index: int) -> str:
    """The path of partition ``index``'s session: ``-partition-<i>`` after the topic's name (before a
    consumer's subscription)."""
    suffix = f"-partition-{index}"
    if kind is WsKind.CONSUMER:
        head, _, subscription = path.rpartition("/")
        return f"{head}{suffix}/{subscription}"
    return path.rstrip("/") + suffix


async def _close_all(upstreams: list[WsClient | None]) -> None:
    with trio.CancelScope(shield=True):
        for upstream in upstreams:
            if upstream is not None:
                await upstream.aclose()
