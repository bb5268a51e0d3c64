"""Who may do what: Pulsar's ``PulsarAuthorizationProvider`` over the namespace policies' ``auth_policies``.

Theory of operation. A request's role (from :mod:`magnetar.bookkeeper.runtime.auth.authentication`) is
checked, strongest grant first:

1. **superuser** - a role in ``super_user_roles`` may do everything (create tenants, grant, read any topic);
2. **tenant admin** - a role in the tenant's ``adminRoles`` (``TenantInfo``) administers the tenant's
   namespaces and topics (policies, permissions, topic deletion, termination, unloading ...) and may
   produce and consume on all of them;
3. **grants** - ``produce``, ``consume``, ``functions`` (also ``sources``, ``sinks``, ``packages``) granted to
   a role on a namespace (``auth_policies.namespace_auth[role]``) or on one topic
   (``auth_policies.destination_auth[topic][role]``; a grant on a partitioned topic covers its partitions).
   A grant on a topic covers ``<topic>-partition-<i>`` only while ``<topic>`` is a partitioned topic with
   more than ``i`` partitions: a grant on a non-partitioned topic ``solo`` says nothing about a topic that
   merely looks like one of its partitions (``solo-partition-7``), nor does a grant on a 3-partition topic
   cover ``part-partition-7``. (Pulsar checks the grants of the partitioned topic's name for any name
   ending in ``-partition-<i>``; Magnetar is stricter.)
   A subscription listed in ``subscription_auth_roles`` may be consumed only by the roles listed there.

Topic operations map to what they need as in Pulsar's ``allowTopicOperationAsync``: lookup, stats and
metadata need ``produce`` or ``consume`` (lookup); producing needs ``produce``; subscribing, reading,
acknowledging, skipping, resetting cursors and peeking need ``consume``; terminating, unloading, deleting,
compacting and topic policies need a tenant admin. Namespace operations: listing topics needs ``produce`` or
``consume`` somewhere in the namespace; everything else (policies, permissions, creating and deleting
topics) needs a tenant admin. Creating, changing and deleting tenants and clusters needs a superuser.

When authorization is off (``authorization_enabled`` false, or authentication off so there is no role),
every check passes. With ``authorization_allow_wildcards_matching`` a granted role ending or starting with
``*`` matches by prefix or suffix (``my.role.*``), as Pulsar's ``authorizationAllowWildcardsMatching``.

Refusals are :class:`~magnetar.bookkeeper.runtime.auth.errors.AuthorizationError` (HTTP 403) whose reason
names the role, the operation and the resource. Grants are read from the metadata store on each check
(policies change rarely and checks happen per admin call or per WebSocket session, not per message).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ConfigDict

from magnetar.bookkeeper.runtime.auth.authentication import SuperUserSettings
from magnetar.bookkeeper.runtime.auth.errors import AuthorizationError
from magnetar.broker.policies import NotFound, Policies, PolicyStore, PreconditionFailed
from magnetar.broker.wire import NamespaceName, TopicName, UnsafeNameError, check_name_characters

ROLE_BYTES_MAX = 1024
NAMESPACE_AUTH = "namespace_auth"
DESTINATION_AUTH = "destination_auth"
SUBSCRIPTION_AUTH_ROLES = "subscription_auth_roles"
SUPERUSER_REQUIRED = "This operation requires super-user access"
TENANT_ADMIN_REQUIRED = "Don't have permission to administrate resources on this tenant"


class AuthAction(enum.StrEnum):
    """Pulsar's ``AuthAction`` (declaration order is the order permissions are listed in)."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class TopicOperation(enum.StrEnum):
    """Pulsar's ``TopicOperation`` (those Magnetar serves)."""

    LOOKUP = "lookup"
    PRODUCE = "produce"
    CONSUME = "consume"
    SUBSCRIBE = "subscribe"
    GET_SUBSCRIPTIONS = "get_subscriptions"
    UNSUBSCRIBE = "unsubscribe"
    SKIP = "skip"
    EXPIRE_MESSAGES = "expire_messages"
    PEEK_MESSAGES = "peek_messages"
    RESET_CURSOR = "reset_cursor"
    GET_BACKLOG_SIZE = "get_backlog_size"
    GET_STATS = "get_stats"
    GET_METADATA = "get_metadata"
    TERMINATE = "terminate"
    UNLOAD = "unload"
    COMPACT = "compact"
    TRUNCATE = "truncate"
    DELETE = "delete"
    CREATE = "create"
    UPDATE_METADATA = "update_metadata"
    GRANT_PERMISSION = "grant_permission"
    GET_PERMISSION = "get_permission"
    REVOKE_PERMISSION = "revoke_permission"
    POLICIES = "policies"


class NamespaceOperation(enum.StrEnum):
    """Pulsar's ``NamespaceOperation`` / ``PolicyName`` operations, as Magnetar checks them."""

    GET_TOPICS = "get_topics"
    GET_BUNDLE = "get_bundle"
    CREATE_TOPIC = "create_topic"
    DELETE_TOPIC = "delete_topic"
    GET_POLICIES = "get_policies"
    SET_POLICIES = "set_policies"
    GRANT_PERMISSION = "grant_permission"
    GET_PERMISSION = "get_permission"
    REVOKE_PERMISSION = "revoke_permission"
    DELETE = "delete"
    CLEAR_BACKLOG = "clear_backlog"
    UNSUBSCRIBE = "unsubscribe"


_LOOKUP_OPS = {TopicOperation.LOOKUP, TopicOperation.GET_STATS, TopicOperation.GET_METADATA}
_CONSUME_OPS = {
    TopicOperation.CONSUME,
    TopicOperation.SUBSCRIBE,
    TopicOperation.GET_SUBSCRIPTIONS,
    TopicOperation.UNSUBSCRIBE,
    TopicOperation.SKIP,
    TopicOperation.EXPIRE_MESSAGES,
    TopicOperation.PEEK_MESSAGES,
    TopicOperation.RESET_CURSOR,
    TopicOperation.GET_BACKLOG_SIZE,
}


class AuthorizationSettings(SuperUserSettings):
    """Authorization settings of a broker (Pulsar's names in snake case; ``super_user_roles`` is
    :class:`SuperUserSettings`')."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    authorization_enabled: bool | None = None
    """Pulsar ``authorizationEnabled``; None (default) follows ``authentication_enabled``, so turning
    authentication on turns authorization on with it (one setting)."""
    authorization_allow_wildcards_matching: bool = False
    """Pulsar ``authorizationAllowWildcardsMatching``."""

    def active(self, authentication_enabled: bool) -> bool:
        """Whether checks run: authorization needs authentication (a role to check)."""
        wanted = authentication_enabled if self.authorization_enabled is None else self.authorization_enabled
        return wanted and authentication_enabled


def check_role_name(role: str) -> None:
    """1 to :data:`ROLE_BYTES_MAX` bytes, and no control or bidirectional formatting character (a role is
    listed with the permissions: :mod:`~magnetar.broker.wire.strict_input`)."""
    if not role or len(role.encode("utf-8", errors="replace")) > ROLE_BYTES_MAX:
        raise PreconditionFailed(f"Invalid role name: it must have 1 to {ROLE_BYTES_MAX} bytes")
    try:
        check_name_characters("role", role)
    except UnsafeNameError as exc:
        raise PreconditionFailed(str(exc)) from None


def parse_actions(values: Iterable[Any]) -> frozenset[AuthAction]:
    """Pulsar action names (``["produce", "consume"]``) -> actions; ValueError names an unknown one."""
    actions = set()
    for value in values:
        try:
            actions.add(AuthAction(str(value)))
        except ValueError:
            known = ", ".join(a.value for a in AuthAction)
            raise ValueError(f"Invalid auth action {value!r} (one of {known})") from None
    return frozenset(actions)


def sorted_actions(actions: Iterable[AuthAction]) -> list[str]:
    order = list(AuthAction)
    return [a.value for a in sorted(set(actions), key=order.index)]


def _actions_of(value: Any) -> set[AuthAction]:
    """Actions stored in a grant, tolerating unknown names written by a newer version."""
    if not isinstance(value, list):
        return set()
    found = set()
    for item in value:
        try:
            found.add(AuthAction(item))
        except ValueError:
            continue
    return found


class AuthorizationService:
    """Checks of one broker over its :class:`~magnetar.broker.policies.store.PolicyStore`."""

    def __init__(
        self, policies: PolicyStore, settings: AuthorizationSettings, *, authentication_enabled: bool
    ) -> None:
        self.policies = policies
        self.settings = settings
        self.enabled = settings.active(authentication_enabled)
        self._superusers = frozenset(settings.super_user_roles)
        self._wildcards = settings.authorization_allow_wildcards_matching

    # -- role matching ---------------------------------------------------------------------------------------

    def _matches(self, granted: str, role: str) -> bool:
        if granted == role:
            return True
        if not self._wildcards:
            return False
        if granted.endswith("*"):
            return role.startswith(granted[:-1])
        if granted.startswith("*"):
            return role.endswith(granted[1:])
        return False

    def _granted(self, grants: Mapping[str, Any], role: str) -> set[AuthAction]:
        actions: set[AuthAction] = set()
        exact = grants.get(role)
        if exact is not None:
            actions |= _actions_of(exact)
        if self._wildcards:
            for granted, value in grants.items():
                if granted != role and self._matches(granted, role):
                    actions |= _actions_of(value)
        return actions

    # -- the questions ---------------------------------------------------------------------------------------

    def is_superuser(self, role: str | None) -> bool:
        return not self.enabled or (role is not None and role in self._superusers)

    async def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        """Superuser, or a role in the tenant's ``adminRoles`` (False for a tenant that does not exist)."""
        if self.is_superuser(role):
            return True
        assert role is not None
        info = await self.policies.get_tenant(tenant)
        return info is not None and any(self._matches(admin, role) for admin in info.adminRoles)

    async def _granting_names(self, topic: TopicName) -> list[str]:
        """The topic names whose grants apply to ``topic``: its own, and its partitioned topic's when it is
        one of that topic's partitions (see the module docstring)."""
        if not topic.is_partition:
            return [topic.full_name]
        base = topic.partitioned_topic
        partitions = await self.policies.get_partitions(str(base.namespace_name), base.local_name)
        if topic.partition_index < partitions:
            return [topic.full_name, base.full_name]
        return [topic.full_name]

    async def _topic_actions(self, topic: TopicName, role: str) -> set[AuthAction]:
        policies = await self.policies.get_namespace(str(topic.namespace_name))
        if policies is None:
            return set()
        auth = policies.auth_policies
        actions = self._granted(auth.get(NAMESPACE_AUTH) or {}, role)
        by_topic = auth.get(DESTINATION_AUTH) or {}
        if not by_topic:
            return actions
        for name in await self._granting_names(topic):
            grants = by_topic.get(name)
            if isinstance(grants, dict):
                actions |= self._granted(grants, role)
        return actions

    async def can_produce(self, topic: TopicName, role: str | None) -> bool:
        if await self.is_tenant_admin(topic.tenant, role):
            return True
        assert role is not None
        return AuthAction.PRODUCE in await self._topic_actions(topic, role)

    async def can_consume(self, topic: TopicName, role: str | None, subscription: str | None = None) -> bool:
        if await self.is_tenant_admin(topic.tenant, role):
            return True
        assert role is not None
        if subscription is not None and not await self._may_use_subscription(topic, role, subscription):
            return False
        return AuthAction.CONSUME in await self._topic_actions(topic, role)

    async def _may_use_subscription(self, topic: TopicName, role: str, subscription: str) -> bool:
        policies = await self.policies.get_namespace(str(topic.namespace_name))
        if policies is None:
            return False
        listed = (policies.auth_policies.get(SUBSCRIPTION_AUTH_ROLES) or {}).get(subscription)
        if not isinstance(listed, list) or not listed:
            return True
        return any(isinstance(r, str) and self._matches(r, role) for r in listed)

    async def can_consume_namespace(self, namespace: NamespaceName, role: str | None) -> bool:
        """Pulsar's check of a binary GET_TOPICS_OF_NAMESPACE: a tenant admin, or ``consume`` granted on the
        namespace itself (a grant on one of its topics is not enough)."""
        if await self.is_tenant_admin(namespace.tenant, role):
            return True
        assert role is not None
        return AuthAction.CONSUME in await self._namespace_actions(namespace, role)

    async def can_lookup(self, topic: TopicName, role: str | None) -> bool:
        if await self.is_tenant_admin(topic.tenant, role):
            return True
        assert role is not None
        return bool({AuthAction.PRODUCE, AuthAction.CONSUME} & await self._topic_actions(topic, role))

    async def can_functions(self, namespace: NamespaceName, role: str | None) -> bool:
        if await self.is_tenant_admin(namespace.tenant, role):
            return True
        assert role is not None
        policies = await self.policies.get_namespace(str(namespace))
        if policies is None:
            return False
        grants = policies.auth_policies.get(NAMESPACE_AUTH) or {}
        return AuthAction.FUNCTIONS in self._granted(grants, role)

    async def allow_topic_operation(
        self, topic: TopicName, role: str | None, operation: TopicOperation, subscription: str | None = None
    ) -> bool:
        if await self.is_tenant_admin(topic.tenant, role):
            return True
        if operation in _LOOKUP_OPS:
            return await self.can_lookup(topic, role)
        if operation is TopicOperation.PRODUCE:
            return await self.can_produce(topic, role)
        if operation in _CONSUME_OPS:
            return await self.can_consume(topic, role, subscription)
        return False  # administrative: tenant admins only

    async def allow_namespace_operation(
        self, namespace: NamespaceName, role: str | None, operation: NamespaceOperation
    ) -> bool:
        if await self.is_tenant_admin(namespace.tenant, role):
            return True
        assert role is not None
        if operation in (NamespaceOperation.GET_TOPICS, NamespaceOperation.GET_BUNDLE):
            return bool(
                {AuthAction.PRODUCE, AuthAction.CONSUME} & await self._namespace_actions(namespace, role)
            )
        if operation in (NamespaceOperation.CLEAR_BACKLOG, NamespaceOperation.UNSUBSCRIBE):
            return AuthAction.CONSUME in await self._namespace_actions(namespace, role)
        return False

    async def _namespace_actions(self, namespace: NamespaceName, role: str) -> set[AuthAction]:
        policies = await self.policies.get_namespace(str(namespace))
        if policies is None:
            return set()
        return self._granted(policies.auth_policies.get(NAMESPACE_AUTH) or {}, role)

    # -- checks that raise -----------------------------------------------------------------------------------

    def check_superuser(self, role: str | None) -> None:
        if not self.is_superuser(role):
            raise AuthorizationError(f"{SUPERUSER_REQUIRED} (role {role!r})")

    async def check_tenant_admin(self, tenant: str, role: str | None) -> None:
        if not await self.is_tenant_admin(tenant, role):
            raise AuthorizationError(f"{TENANT_ADMIN_REQUIRED} (role {role!r}, tenant {tenant!r})")

    async def check_topic_operation(
        self, topic: TopicName, role: str | None, operation: TopicOperation, subscription: str | None = None
    ) -> None:
        if not await self.allow_topic_operation(topic, role, operation, subscription):
            on_sub = f" with subscription {subscription!r}" if subscription is not None else ""
            raise AuthorizationError(
                f"Role {role!r} is not authorized to {operation.value} on topic {topic.full_name}{on_sub}"
            )

    async def check_namespace_operation(
        self, namespace: NamespaceName, role: str | None, operation: NamespaceOperation
    ) -> None:
        if not await self.allow_namespace_operation(namespace, role, operation):
            raise AuthorizationError(
                f"Role {role!r} is not authorized to {operation.value} on namespace {namespace}"
            )

    # -- grants (the permissions admin API) ------------------------------------------------------------------

    async def namespace_permissions(self, namespace: NamespaceName) -> dict[str, list[str]]:
        """``GET .../namespaces/{t}/{ns}/permissions``: ``{"role": ["produce", "consume"]}``."""
        policies = await self._namespace(namespace)
        grants = policies.auth_policies.get(NAMESPACE_AUTH) or {}
        return {role: sorted_actions(_actions_of(value)) for role, value in sorted(grants.items())}

    async def grant_namespace_permission(
        self, namespace: NamespaceName, role: str, actions: Iterable[AuthAction]
    ) -> None:
        check_role_name(role)
        wanted = sorted_actions(actions)

        def grant(policies: Policies) -> Policies:
            auth = _copy_auth(policies)
            auth[NAMESPACE_AUTH][role] = wanted
            return policies.model_copy(update={"auth_policies": auth})

        await self.policies.update_namespace(str(namespace), grant)

    async def revoke_namespace_permission(self, namespace: NamespaceName, role: str) -> None:
        def revoke(policies: Policies) -> Policies:
            auth = _copy_auth(policies)
            auth[NAMESPACE_AUTH].pop(role, None)
            return policies.model_copy(update={"auth_policies": auth})

        await self.policies.update_namespace(str(namespace), revoke)

    async def topic_permissions(self, topic: TopicName) -> dict[str, list[str]]:
        """``GET .../{topic}/permissions``: the namespace's grants united with the topic's own, per role."""
        policies = await self._namespace(topic.namespace_name)
        auth = policies.auth_policies
        merged: dict[str, set[AuthAction]] = {}
        for role, value in (auth.get(NAMESPACE_AUTH) or {}).items():
            merged.setdefault(role, set()).update(_actions_of(value))
        by_topic = auth.get(DESTINATION_AUTH) or {}
        for name in await self._granting_names(topic):
            grants = by_topic.get(name)
            if isinstance(grants, dict):
                for role, value in grants.items():
                    merged.setdefault(role, set()).update(_actions_of(value))
        return {role: sorted_actions(actions) for role, actions in sorted(merged.items())}

    async def grant_topic_permission(
        self, topic: TopicName, role: str, actions: Iterable[AuthAction]
    ) -> None:
        check_role_name(role)
        wanted = sorted_actions(actions)
        name = topic.full_name

        def grant(policies: Policies) -> Policies:
            auth = _copy_auth(policies)
            auth[DESTINATION_AUTH].setdefault(name, {})[role] = wanted
            return policies.model_copy(update={"auth_policies": auth})

        await self.policies.update_namespace(str(topic.namespace_name), grant)

    async def revoke_topic_permission(self, topic: TopicName, role: str) -> None:
        """Pulsar: 412 when the role has no grant on the topic itself (namespace grants stay)."""
        name = topic.full_name

        def revoke(policies: Policies) -> Policies:
            auth = _copy_auth(policies)
            grants = auth[DESTINATION_AUTH].get(name)
            if not isinstance(grants, dict) or role not in grants:
                raise PreconditionFailed("Permissions are not set at the topic level")
            del grants[role]
            if not grants:
                del auth[DESTINATION_AUTH][name]
            return policies.model_copy(update={"auth_policies": auth})

        await self.policies.update_namespace(str(topic.namespace_name), revoke)

    async def grant_subscription_permission(
        self, namespace: NamespaceName, subscription: str, roles: Iterable[str]
    ) -> None:
        """Only ``roles`` may consume on ``subscription`` (Pulsar ``grantPermissionOnSubscription``)."""
        wanted = sorted(set(roles))
        for role in wanted:
            check_role_name(role)

        def grant(policies: Policies) -> Policies:
            auth = _copy_auth(policies)
            auth[SUBSCRIPTION_AUTH_ROLES][subscription] = wanted
            return policies.model_copy(update={"auth_policies": auth})

        await self.policies.update_namespace(str(namespace), grant)

    async def revoke_subscription_permission(
        self, namespace: NamespaceName, subscription: str, role: str
    ) -> None:
        def revoke(policies: Policies) -> Policies:
            auth = _copy_auth(policies)
            listed = auth[SUBSCRIPTION_AUTH_ROLES].get(subscription)
            if isinstance(listed, list) and role in listed:
                listed.remove(role)
                if not listed:
                    del auth[SUBSCRIPTION_AUTH_ROLES][subscription]
            return policies.model_copy(update={"auth_policies": auth})

        await self.policies.update_namespace(str(namespace), revoke)

    async def _namespace(self, namespace: NamespaceName) -> Policies:
        policies = await self.policies.get_namespace(str(namespace))
        if policies is None:
            raise NotFound("Namespace does not exist")
        return policies


def _copy_auth(policies: Policies) -> dict[str, dict[str, Any]]:
    """A deep-enough copy of ``auth_policies`` with its three maps present (the CAS loop may re-run)."""
    auth = policies.auth_policies
    copied: dict[str, dict[str, Any]] = {}
    for key in (NAMESPACE_AUTH, DESTINATION_AUTH, SUBSCRIPTION_AUTH_ROLES):
        value = auth.get(key)
        source = value if isinstance(value, dict) else {}
        if key == DESTINATION_AUTH:
            copied[key] = {
                name: dict(grants) if isinstance(grants, dict) else {} for name, grants in source.items()
            }
        else:
            copied[key] = {name: list(v) if isinstance(v, list) else [] for name, v in source.items()}
    for key, value in auth.items():
        copied.setdefault(key, value)
    return copied
