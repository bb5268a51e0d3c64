"""Topic lookup over HTTP (Pulsar's ``TopicLookup``): which broker serves a topic.

``GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}`` answers Pulsar's ``LookupData`` with the owning
broker's URLs. A topic whose bundle nobody owns is placed by the load manager (:mod:`.load_manager`), as
Pulsar's: the broker asked takes it when it is chosen, else the answer is a 307 to the broker that decides
(the leader; ``authoritative=false``) or to the one chosen (``authoritative=true``), which takes it. An owner
whose broker process does not answer is never named (503: retry). ``.../bundle`` answers the bundle's range
(``"0x00000000_0x40000000"``). A missing namespace is 404, an invalid name 412, a partition beyond its
partitioned topic's count 404 (it names no topic). With authentication on, both need a token (401) of a role
that may produce or consume on the topic (403), as Pulsar's lookup operation; :meth:`LookupHandlers.check`
decides that from the request head, before any body is read. A ``listenerName`` parameter (or an
``X-Pulsar-ListenerName`` header) answers the owner's URLs on that advertised listener
(:mod:`magnetar.broker.wire.listeners`), and travels with a redirect.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlencode

from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.runtime.auth.errors import AuthorizationError
from magnetar.bookkeeper.runtime.http import HttpError, HttpRequest, HttpResponse, RequestHead, json_response
from magnetar.broker.core import ServiceError
from magnetar.broker.ownership.load_manager import Resolution
from magnetar.broker.ownership.manager import OwnerInfo
from magnetar.broker.protocols.http_status import http_status
from magnetar.broker.security import BrokerSecurity, TopicOperation
from magnetar.broker.wire import (
    InvalidTopicNameError,
    TopicDomain,
    TopicName,
    listener_named,
    unknown_listener,
)


def topic_from_path(request: HttpRequest | RequestHead) -> TopicName:
    """The topic named by ``{domain}/{tenant}/{namespace}/{topic}`` path parameters; 412 if invalid."""
    params = request.path_params
    try:
        domain = TopicDomain(params["domain"])
        topic = TopicName(domain, params["tenant"], params["namespace"], params["topic"])
    except (ValueError, InvalidTopicNameError) as exc:
        raise HttpError(412, f"Topic name is not valid: {exc}") from None
    return topic


class LookupHost(Protocol):
    """The broker's service, as the lookup routes see it (the service satisfies it; this package never
    imports it)."""

    @property
    def security(self) -> BrokerSecurity: ...
    async def check_partition_exists(self, topic: TopicName) -> None: ...
    async def lookup(self, topic: TopicName) -> Resolution: ...
    async def bundle_of(self, topic: TopicName) -> tuple[str, str]:
        """The topic's namespace and the range of the bundle holding it."""
        ...


def lookup_data(owner: OwnerInfo, listener_name: str = "") -> dict[str, Any]:
    """Pulsar's ``LookupData``: the owner's binary URLs, on the named listener when one is named (500 with
    Pulsar's message when the owner has no such listener)."""
    url, url_tls = owner.nativeUrl, owner.nativeUrlTls
    if listener_name:
        listener = listener_named(owner.advertisedListeners, listener_name)
        if listener is None:
            raise HttpError(500, unknown_listener(listener_name))
        url, url_tls = listener.url, listener.url_tls
    return {
        "brokerUrl": url,
        "brokerUrlTls": url_tls,
        "httpUrl": owner.httpUrl,
        "httpUrlTls": owner.httpUrlTls,
        "nativeUrl": url,
        "brokerUrlSsl": "",
    }


def listener_name_of(request: HttpRequest) -> str:
    """Pulsar's lookup parameter ``listenerName``, else its header ``X-Pulsar-ListenerName`` ("" for none;
    blank is none)."""
    name = request.query.get("listenerName") or request.head.header("x-pulsar-listenername") or ""
    return name.strip()


class LookupHandlers:
    def __init__(self, service: LookupHost) -> None:
        self._service = service

    async def check(self, head: RequestHead) -> None:
        """The routes' head check: a token of a role that may look the topic up."""
        security = self._service.security
        principal = security.authenticate_http(head)
        topic = topic_from_path(head)
        try:
            await security.authorization.check_topic_operation(topic, principal.role, TopicOperation.LOOKUP)
        except AuthorizationError as exc:
            raise HttpError(403, exc.reason) from None
        except MetadataStoreError as exc:
            raise HttpError(503, f"Failed to check authorization: {type(exc).__name__}") from None

    async def lookup(self, request: HttpRequest) -> HttpResponse:
        topic = topic_from_path(request)
        try:
            await self._service.check_partition_exists(topic)
            resolution = await self._service.lookup(topic)
        except ServiceError as exc:
            raise HttpError(http_status(exc), str(exc)) from None
        owner = resolution.owner
        listener_name = listener_name_of(request)
        if resolution.redirect:
            base = owner.httpUrlTls if request.head.tls and owner.httpUrlTls else owner.httpUrl
            pairs = [(k, v) for k, v in request.query.pairs if k not in ("authoritative", "listenerName")]
            pairs.append(("authoritative", "true" if resolution.authoritative else "false"))
            if listener_name:  # the owner answers on the same listener, as Pulsar's redirect says
                pairs.append(("listenerName", listener_name))
            location = f"{base.rstrip('/')}{request.path}?{urlencode(pairs)}"
            raise HttpError(307, f"Redirect to {owner.httpUrl}", (("location", location),))
        return json_response(lookup_data(owner, listener_name))

    async def bundle(self, request: HttpRequest) -> HttpResponse:
        topic = topic_from_path(request)
        try:
            await self._service.check_partition_exists(topic)
            _, bundle = await self._service.bundle_of(topic)
        except ServiceError as exc:
            raise HttpError(http_status(exc), str(exc)) from None
        return json_response(bundle)
