"""The broker's security front: authentication, authorization and the protective limits, as the HTTP
routes and WebSocket handlers call them.

Theory of operation. One :class:`BrokerSecurity` per broker holds the
:class:`~magnetar.bookkeeper.runtime.auth.authentication.AuthenticationService`, the
:class:`~.authorization.AuthorizationService` and the rate limiters. Every protected entry point calls it
first, before doing any work:

* an HTTP route: :meth:`BrokerSecurity.authenticate_http` (401 ``{"reason": "Authentication required:
  ..."}`` with ``WWW-Authenticate: Bearer``), then its authorization check (403), then
  :meth:`BrokerSecurity.check_admin_rate` (429 with ``Retry-After``);
* a session's upgrade: :meth:`BrokerSecurity.authenticate_upgrade` (header or ``token`` query parameter),
  then :meth:`authorize_producer` / :meth:`authorize_consumer` / :meth:`authorize_reader`. These refuse with
  protocol-neutral errors (:class:`~magnetar.broker.core.errors.AccessError`: not authenticated, not
  authorized, or the grants unreadable), which each protocol answers in its own terms - the WebSocket upgrade
  401, 403 or 503 on the upgrade itself, never a 101 (:mod:`magnetar.broker.protocols.http_status`);
* a publish on an accepted producer session: :meth:`PublishLimiter.try_publish` per connection and per
  role, refused with Pulsar's ``send-error`` ack for that message only - the session and everyone else go on.

Rate limits are off (0) by default, as Pulsar ships them; ``http_connections_per_ip_max`` (Pulsar's
``brokerMaxConnectionsPerIp``) lives in the HTTP server, the message size bound in ``ws_frame_bytes_max``
(Pulsar's ``maxMessageSize``), and ``topics_per_namespace_max`` (Pulsar's ``maxTopicsPerNamespace``) is
checked where topics are created (:meth:`BrokerSecurity.check_topic_count`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.runtime import Clock, KeyedRateLimiter, RateLimitedError, TokenBucket
from magnetar.bookkeeper.runtime.auth.authentication import (
    AuthenticationService,
    Principal,
    http_reason,
)
from magnetar.bookkeeper.runtime.auth.errors import AuthenticationError, AuthorizationError
from magnetar.bookkeeper.runtime.http import HttpError, RequestHead
from magnetar.broker.core import (
    AuthorizationUncheckedError,
    NotAuthenticatedError,
    NotAuthorizedError,
    TooManyTopicsError,
)
from magnetar.broker.security.authorization import AuthorizationService, TopicOperation
from magnetar.broker.wire import NamespaceName, TopicName

WWW_AUTHENTICATE = ("www-authenticate", 'Bearer realm="magnetar"')


class SecurityLimits(BaseModel):
    """Limits that keep one user from hurting the others (0: off, Pulsar's default for each)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    admin_requests_per_role_per_s: Annotated[float, Field(ge=0)] = 0.0
    """Admin REST calls per second for one role (anonymous callers: per client address)."""
    admin_requests_per_connection_per_s: Annotated[float, Field(ge=0)] = 0.0
    """Admin REST calls per second on one HTTP connection (keep-alive)."""
    admin_requests_burst: Annotated[int, Field(ge=1)] = 100
    publish_messages_per_connection_per_s: Annotated[float, Field(ge=0)] = 0.0
    """Messages per second one WebSocket producer session may publish."""
    publish_messages_per_role_per_s: Annotated[float, Field(ge=0)] = 0.0
    """Messages per second all sessions of one role may publish together."""
    publish_messages_burst: Annotated[int, Field(ge=1)] = 1000
    topics_per_namespace_max: Annotated[int, Field(ge=0)] = 0
    """Pulsar ``maxTopicsPerNamespace``: creating one more topic in a full namespace is refused (412)."""
    rate_limit_keys_max: Annotated[int, Field(ge=1)] = 10_000
    """Roles or addresses tracked at once by each per-role limiter (least recently used forgotten)."""


class PublishLimiter:
    """The publish limits of one producer session: its own bucket and its role's shared one."""

    def __init__(self, connection: TokenBucket | None, role: KeyedRateLimiter | None, role_key: str) -> None:
        self._connection = connection
        self._role = role
        self._role_key = role_key

    @property
    def unlimited(self) -> bool:
        """No publish limit applies to the session: :meth:`try_publish` always answers None."""
        return self._connection is None and self._role is None

    def try_publish(self, messages: int = 1) -> str | None:
        """None when the messages may go; else why they may not (for a ``send-error`` ack)."""
        if self._connection is not None and not self._connection.try_acquire(messages):
            rate = self._connection.rate_per_s
            return f"Too many messages: publish_messages_per_connection_per_s={rate:g} exceeded"
        if self._role is not None and not self._role.try_acquire(self._role_key, messages):
            rate = self._role.rate_per_s
            return (
                f"Too many messages: publish_messages_per_role_per_s={rate:g} exceeded for {self._role_key}"
            )
        return None


class BrokerSecurity:
    def __init__(
        self,
        authentication: AuthenticationService,
        authorization: AuthorizationService,
        limits: SecurityLimits,
        clock: Clock,
    ) -> None:
        self.authentication = authentication
        self.authorization = authorization
        self.limits = limits
        self._clock = clock
        keys = limits.rate_limit_keys_max
        self._admin = (
            KeyedRateLimiter(
                limits.admin_requests_per_role_per_s,
                limits.admin_requests_burst,
                clock,
                setting="admin_requests_per_role_per_s",
                keys_max=keys,
            )
            if limits.admin_requests_per_role_per_s > 0
            else None
        )
        self._admin_connection = (
            KeyedRateLimiter(
                limits.admin_requests_per_connection_per_s,
                limits.admin_requests_burst,
                clock,
                setting="admin_requests_per_connection_per_s",
                keys_max=keys,
            )
            if limits.admin_requests_per_connection_per_s > 0
            else None
        )
        self._publish_role = (
            KeyedRateLimiter(
                limits.publish_messages_per_role_per_s,
                limits.publish_messages_burst,
                clock,
                setting="publish_messages_per_role_per_s",
                keys_max=keys,
            )
            if limits.publish_messages_per_role_per_s > 0
            else None
        )

    # -- authentication ----------------------------------------------------------------------------------

    def authenticate_http(self, head: RequestHead) -> Principal:
        """The caller of an HTTP request, or :class:`HttpError` 401."""
        try:
            return self.authentication.authenticate(head)
        except AuthenticationError as exc:
            raise HttpError(401, http_reason(exc), (WWW_AUTHENTICATE,)) from None

    def authenticate_upgrade(self, head: RequestHead) -> Principal:
        """The caller of a session's upgrade (header or ``token`` parameter), or
        :class:`~magnetar.broker.core.errors.NotAuthenticatedError` (the WebSocket upgrade answers it 401)."""
        try:
            return self.authentication.authenticate(head, allow_query_token=True)
        except AuthenticationError as exc:
            raise NotAuthenticatedError(f"Failed to authenticate: {exc.reason}") from None

    # -- authorization of WebSocket sessions -------------------------------------------------------------

    async def _authorize_session(
        self, principal: Principal, topic: TopicName, operation: TopicOperation, subscription: str | None
    ) -> None:
        try:
            await self.authorization.check_topic_operation(topic, principal.role, operation, subscription)
        except AuthorizationError as exc:
            raise NotAuthorizedError(f"Not authorized: {exc.reason}") from None
        except MetadataStoreError as exc:  # the grants could not be read: try again later
            raise AuthorizationUncheckedError(
                f"Failed to check authorization: {type(exc).__name__}"
            ) from None

    async def authorize_producer(self, principal: Principal, topic: TopicName) -> None:
        await self._authorize_session(principal, topic, TopicOperation.PRODUCE, None)

    async def authorize_consumer(self, principal: Principal, topic: TopicName, subscription: str) -> None:
        await self._authorize_session(principal, topic, TopicOperation.CONSUME, subscription)

    async def authorize_reader(self, principal: Principal, topic: TopicName) -> None:
        await self._authorize_session(principal, topic, TopicOperation.CONSUME, None)

    async def authorize_lookup(self, principal: Principal, topic: TopicName) -> None:
        """What a produce or a consume permission allows (Pulsar's ``lookup``): reading a topic's schema."""
        await self._authorize_session(principal, topic, TopicOperation.LOOKUP, None)

    async def authorize_namespace_topics(self, principal: Principal, namespace: NamespaceName) -> None:
        """Listing a namespace's topics over the binary protocol (pattern consumers): ``consume`` on the
        namespace, as Pulsar's broker checks it."""
        try:
            allowed = await self.authorization.can_consume_namespace(namespace, principal.role)
        except MetadataStoreError as exc:
            raise AuthorizationUncheckedError(
                f"Failed to check authorization: {type(exc).__name__}"
            ) from None
        if not allowed:
            raise NotAuthorizedError(
                f"Not authorized: Role {principal.role!r} is not authorized to get the topics of "
                f"namespace {namespace}"
            )

    # -- limits --------------------------------------------------------------------------------------------

    def check_admin_rate(self, principal: Principal, head: RequestHead) -> None:
        """Count one admin call of the caller; beyond the rate: :class:`HttpError` 429, ``Retry-After``."""
        try:
            if self._admin_connection is not None and head.client is not None:
                connection = f"{head.client[0]}:{head.client[1]}"
                self._admin_connection.acquire_or_raise(connection, what="admin requests on connection")
            if self._admin is not None:
                key = principal.role if principal.role is not None else _address(head)
                self._admin.acquire_or_raise(key, what="admin requests")
        except RateLimitedError as exc:
            retry = max(1, round(exc.retry_after_s))
            raise HttpError(429, f"Too Many Requests: {exc}", (("retry-after", str(retry)),)) from None

    def publish_limiter(self, principal: Principal, head: RequestHead) -> PublishLimiter:
        limits = self.limits
        connection = (
            TokenBucket(
                limits.publish_messages_per_connection_per_s, limits.publish_messages_burst, self._clock
            )
            if limits.publish_messages_per_connection_per_s > 0
            else None
        )
        role_key = principal.role if principal.role is not None else _address(head)
        return PublishLimiter(connection, self._publish_role, role_key)

    def check_topic_count(self, namespace: str, existing_topics: int, adding: int = 1) -> None:
        """Refuse creating ``adding`` topics (partitions count one each) in a namespace that would then hold
        more than ``topics_per_namespace_max`` (412, as Pulsar)."""
        limit = self.limits.topics_per_namespace_max
        if limit and existing_topics + adding > limit:
            raise TooManyTopicsError(
                f"Exceed maximum number of topics in namespace {namespace} (topics_per_namespace_max={limit})"
            )


def _address(head: RequestHead) -> str:
    return head.client[0] if head.client is not None else "?"
