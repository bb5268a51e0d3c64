"""The broker's owner proxy: serves a WebSocket session whose topic another broker owns (see the package's
docstring for the design), within ``ws_proxy_sessions_max`` sessions."""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import trio

from magnetar.bookkeeper.runtime.auth.keys import read_token_setting
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context
from magnetar.bookkeeper.runtime.http import WebSocketRequest, error_response
from magnetar.bookkeeper.runtime.http.ws_client import WsClient, WsRejected, open_ws_client
from magnetar.broker.core.errors import ServiceError
from magnetar.broker.protocols.owner_proxy.metrics import ProxyCounters, ProxyMetrics
from magnetar.broker.protocols.owner_proxy.relay import GaveUp, LookupFailed, Relay, connect_with_retry
from magnetar.broker.protocols.owner_proxy.tracking import (
    BinaryProducerTracker,
    ConsumerTracker,
    JsonProducerTracker,
    Tracker,
)
from magnetar.broker.protocols.pulsar_ws.params import WsKind
from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL
from magnetar.broker.wire.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

PROXIED_BY_HEADER = "x-magnetar-proxied-by"
"""Marks an upstream session: the broker receiving it serves the topic itself or refuses (307), never
proxies again (no chains, no loops)."""


class OwnerProxy:
    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._settings = service.settings
        self.counters = ProxyCounters()
        self.metrics = ProxyMetrics(service.settings.cluster, self.counters)
        """The proxy's ``/metrics`` families (:mod:`.metrics`), added by the broker's HTTP application."""
        self._ssl_context: ssl.SSLContext | None = None
        self._token: str | None = None
        self._prepared = False

    def proxies(self, request: WebSocketRequest) -> bool:
        """Whether a session this broker cannot serve itself is proxied (else: 307 to the owner)."""
        return self._settings.ws_proxy_enabled and request.head.header(PROXIED_BY_HEADER) is None

    def _prepare(self) -> None:
        """Read the broker's own credentials once (``KeyConfigError`` if the token file cannot be read)."""
        if self._prepared:
            return
        settings = self._settings
        token_setting = settings.broker_client_auth_token or settings.bookkeeper_auth_token
        if token_setting:
            self._token = read_token_setting(token_setting, "broker_client_auth_token")
        trust = settings.broker_client_tls_trust_certs_file or settings.tls_trust_certs_file
        self._ssl_context = client_ssl_context(
            trust_certs_file=trust, check_hostname=settings.broker_client_tls_hostname_verification
        )
        self._prepared = True

    def _url(self, http_url: str, http_url_tls: str, target_path: str, query: str) -> str:
        if http_url_tls and (self._settings.broker_client_tls_enabled or not http_url):
            base = "wss://" + http_url_tls.split("://", 1)[-1]
        else:
            base = "ws://" + http_url.split("://", 1)[-1]
        return base.rstrip("/") + target_path + (f"?{query}" if query else "")

    async def serve(
        self, request: WebSocketRequest, kind: WsKind, topic: TopicName, http_url: str, http_url_tls: str
    ) -> None:
        """Open the session on the owner (``http_url`` first, then wherever lookups say), accept the client
        with the subprotocol the owner chose and relay until either side ends it. A refusal by the owner is
        passed to the client as it is (status and reason); an owner unreachable within the deadline is 503."""
        settings = self._settings
        counters = self.counters
        if counters.sessions >= settings.ws_proxy_sessions_max:
            bound = settings.ws_proxy_sessions_max
            reason = f"Too many proxied sessions on this broker (ws_proxy_sessions_max={bound})"
            counters.sessions_refused += 1
            await request.reject(error_response(503, reason))
            return
        counters.sessions += 1
        try:
            await self._serve(request, kind, topic, http_url, http_url_tls)
        finally:
            counters.sessions -= 1

    async def _serve(
        self, request: WebSocketRequest, kind: WsKind, topic: TopicName, http_url: str, http_url_tls: str
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
            upstream = await connect_with_retry(connect, dict, self._settings, str(topic))
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
        tracker = _tracker(request, kind, upstream.subprotocol)
        relay = Relay(ws, upstream, tracker, connect, self._settings, str(topic), self.counters)
        await relay.run()

    async def _open(
        self, request: WebSocketRequest, http_url: str, http_url_tls: str, overrides: dict[str, str]
    ) -> WsClient:
        pairs = [(k, v) for k, v in request.query.pairs if k not in overrides and k != "token"]
        pairs += list(overrides.items())
        url = self._url(http_url, http_url_tls, request.head.path, urlencode(pairs))
        headers = [(PROXIED_BY_HEADER, self._service.http_url)]
        if self._token is not None and self._settings.authentication_enabled:
            headers.append(("authorization", f"Bearer {self._token}"))
        return await open_ws_client(
            url,
            headers=headers,
            subprotocols=request.subprotocols,
            ssl_context=self._ssl_context if url.startswith("wss://") else None,
            redirects_max=self._settings.ws_proxy_redirects_max,
            message_bytes_max=self._settings.ws_frame_bytes_max,
        )


def _tracker(request: WebSocketRequest, kind: WsKind, subprotocol: str | None) -> Tracker:
    binary = subprotocol == SUBPROTOCOL
    if kind is WsKind.PRODUCER:
        return BinaryProducerTracker() if binary else JsonProducerTracker()
    pull_mode = request.query.get("pullMode", "false").lower() == "true"
    return ConsumerTracker(binary=binary, pull_mode=pull_mode, reader=kind is WsKind.READER)
