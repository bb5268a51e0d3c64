"""Who may call each admin route: one table, checked before any route does its work.

Theory of operation. Every admin request passes :func:`check_access` first (from the framework's handler):

1. authentication - a valid token, else 401 ``{"reason": "Authentication required: ..."}``;
2. the admin rate limits (per role, per connection), else 429 with ``Retry-After``;
3. the route's rule from :data:`RULES`, else 403 with a reason naming the role and the operation.

The rules follow Pulsar's admin resources: clusters and tenants are the superuser's (reading the cluster
list needs only a valid token; a tenant admin may read its own tenant); namespaces, their policies and
permissions, creating and deleting topics, partitions, topic policies, terminate/unload/truncate are the
tenant admin's; topic stats and partition metadata need ``produce`` or ``consume`` (lookup); subscriptions,
peeking and reading messages need ``consume``; listing a namespace's topics needs ``produce`` or ``consume``
somewhere in it. Health (the readiness probe) and the OpenAPI document are open. A route without a rule is
the superuser's - a new route is closed until someone decides - and a test checks that every route has one.

When the context carries no :class:`~magnetar.broker.security.broker_security.BrokerSecurity` (metadata-only
tools and tests), or authentication is off, every check passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from magnetar.bookkeeper.runtime.auth.authentication import Principal
from magnetar.bookkeeper.runtime.auth.errors import AuthorizationError
from magnetar.bookkeeper.runtime.http import HttpError, HttpRequest
from magnetar.broker.policies import CATALOGUE
from magnetar.broker.security import AuthorizationService, BrokerSecurity, NamespaceOperation, TopicOperation
from magnetar.broker.wire import (
    InvalidTopicNameError,
    NamespaceName,
    TopicDomain,
    TopicName,
    check_named_entity,
    url_decode,
)


class Kind(Enum):
    OPEN = "open"
    AUTHENTICATED = "authenticated"
    SUPERUSER = "superuser"
    TENANT_ADMIN = "tenant admin"
    NAMESPACE = "namespace"
    TOPIC = "topic"


@dataclass(frozen=True, slots=True)
class Access:
    kind: Kind
    namespace_operation: NamespaceOperation | None = None
    topic_operation: TopicOperation | None = None


OPEN = Access(Kind.OPEN)
AUTHENTICATED = Access(Kind.AUTHENTICATED)
SUPERUSER = Access(Kind.SUPERUSER)
TENANT_ADMIN = Access(Kind.TENANT_ADMIN)


def namespace(operation: NamespaceOperation) -> Access:
    return Access(Kind.NAMESPACE, namespace_operation=operation)


def topic(operation: TopicOperation) -> Access:
    return Access(Kind.TOPIC, topic_operation=operation)


NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC_PREFIX = "/admin/v2/persistent/{tenant}/{namespace}"
NON_PERSISTENT_PREFIX = "/admin/v2/non-persistent/{tenant}/{namespace}"
T = TOPIC_PREFIX + "/{topic}"
SUB = T + "/subscription/{subscription}"
SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
_NS_POLICIES = ("retention", "messageTTL", "backlogQuota", "backlogQuotaMap", *(s.ns_path for s in CATALOGUE))
_TOPIC_POLICIES = (
    "retention",
    "messageTTL",
    "backlogQuota",
    "backlogQuotaMap",
    *(s.topic_path for s in CATALOGUE if s.topic_path is not None),
    "{subscription}/dispatchRate",  # one subscription's own dispatch rate
)
TN = TopicOperation
NO = NamespaceOperation


def _rules() -> dict[tuple[str, str], Access]:
    rules: dict[tuple[str, str], Access] = {
        ("GET", "/admin/v2/openapi.json"): OPEN,
        ("GET", "/admin/v2/brokers/health"): OPEN,
        ("GET", "/admin/v2/brokers"): SUPERUSER,
        ("GET", "/admin/v2/brokers/{cluster}"): SUPERUSER,
        ("GET", "/admin/v2/brokers/version"): AUTHENTICATED,
        ("GET", "/admin/v2/brokers/ready"): OPEN,
        ("GET", "/admin/v2/brokers/leaderBroker"): SUPERUSER,
        ("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces"): SUPERUSER,
        ("GET", "/admin/v2/clusters"): AUTHENTICATED,
        ("GET", "/admin/v2/clusters/{cluster}"): AUTHENTICATED,
        ("PUT", "/admin/v2/clusters/{cluster}"): SUPERUSER,
        ("POST", "/admin/v2/clusters/{cluster}"): SUPERUSER,
        ("DELETE", "/admin/v2/clusters/{cluster}"): SUPERUSER,
        ("GET", "/admin/v2/tenants"): SUPERUSER,
        ("GET", "/admin/v2/tenants/{tenant}"): TENANT_ADMIN,
        ("PUT", "/admin/v2/tenants/{tenant}"): SUPERUSER,
        ("POST", "/admin/v2/tenants/{tenant}"): SUPERUSER,
        ("DELETE", "/admin/v2/tenants/{tenant}"): SUPERUSER,
        ("GET", "/admin/v2/namespaces/{tenant}"): TENANT_ADMIN,
        ("PUT", NS): TENANT_ADMIN,
        ("GET", NS): namespace(NO.GET_POLICIES),
        ("DELETE", NS): TENANT_ADMIN,
        ("GET", f"{NS}/topics"): namespace(NO.GET_TOPICS),
        ("GET", f"{NS}/bundles"): namespace(NO.GET_BUNDLE),
        ("GET", f"{NS}/permissions"): namespace(NO.GET_PERMISSION),
        ("POST", f"{NS}/permissions/{{role}}"): namespace(NO.GRANT_PERMISSION),
        ("DELETE", f"{NS}/permissions/{{role}}"): namespace(NO.REVOKE_PERMISSION),
        ("POST", f"{NS}/permissionOnSubscription/{{subscription}}"): namespace(NO.GRANT_PERMISSION),
        ("DELETE", f"{NS}/permissionOnSubscription/{{subscription}}/{{role}}"): namespace(
            NO.REVOKE_PERMISSION
        ),
        ("GET", TOPIC_PREFIX): namespace(NO.GET_TOPICS),
        ("GET", f"{TOPIC_PREFIX}/partitioned"): namespace(NO.GET_TOPICS),
        ("GET", NON_PERSISTENT_PREFIX): namespace(NO.GET_TOPICS),
        ("GET", f"{NON_PERSISTENT_PREFIX}/partitioned"): namespace(NO.GET_TOPICS),
        ("GET", f"{NON_PERSISTENT_PREFIX}/{{bundle}}"): namespace(NO.GET_TOPICS),
        ("GET", f"{NON_PERSISTENT_PREFIX}/{{topic}}/stats"): topic(TN.GET_STATS),
        ("GET", f"{NON_PERSISTENT_PREFIX}/{{topic}}/internalStats"): topic(TN.GET_STATS),
        ("DELETE", f"{NON_PERSISTENT_PREFIX}/{{topic}}"): topic(TN.DELETE),
        ("PUT", T): namespace(NO.CREATE_TOPIC),
        ("DELETE", T): topic(TN.DELETE),
        ("PUT", f"{T}/partitions"): namespace(NO.CREATE_TOPIC),
        ("GET", f"{T}/partitions"): topic(TN.GET_METADATA),
        ("POST", f"{T}/partitions"): topic(TN.UPDATE_METADATA),
        ("DELETE", f"{T}/partitions"): topic(TN.DELETE),
        ("PUT", f"{T}/unload"): topic(TN.UNLOAD),
        ("POST", f"{T}/terminate"): topic(TN.TERMINATE),
        ("DELETE", f"{T}/truncate"): topic(TN.TRUNCATE),
        ("GET", f"{T}/stats"): topic(TN.GET_STATS),
        ("GET", f"{T}/internalStats"): topic(TN.GET_STATS),
        ("GET", f"{T}/partitioned-stats"): topic(TN.GET_STATS),
        ("GET", f"{T}/partitioned-internalStats"): topic(TN.GET_STATS),
        ("GET", f"{T}/properties"): topic(TN.GET_METADATA),
        ("PUT", f"{T}/properties"): topic(TN.UPDATE_METADATA),
        ("DELETE", f"{T}/properties"): topic(TN.UPDATE_METADATA),
        ("PUT", f"{T}/compaction"): topic(TN.COMPACT),
        ("GET", f"{T}/compaction"): topic(TN.COMPACT),
        ("POST", f"{SUB}/expireMessages"): topic(TN.EXPIRE_MESSAGES),
        ("GET", f"{T}/lastMessageId"): topic(TN.PEEK_MESSAGES),
        ("GET", f"{T}/subscriptions"): topic(TN.GET_SUBSCRIPTIONS),
        ("GET", f"{T}/ledger/{{ledger}}/entry/{{entry}}"): topic(TN.PEEK_MESSAGES),
        ("GET", f"{T}/examinemessage"): topic(TN.PEEK_MESSAGES),
        ("GET", f"{T}/messageid/{{timestamp}}"): topic(TN.PEEK_MESSAGES),
        ("GET", f"{T}/entries"): topic(TN.PEEK_MESSAGES),
        ("POST", f"{T}/all_subscription/expireMessages/{{seconds}}"): topic(TN.EXPIRE_MESSAGES),
        ("GET", f"{T}/permissions"): topic(TN.GET_PERMISSION),
        ("POST", f"{T}/permissions/{{role}}"): topic(TN.GRANT_PERMISSION),
        ("DELETE", f"{T}/permissions/{{role}}"): topic(TN.REVOKE_PERMISSION),
        ("PUT", SUB): topic(TN.SUBSCRIBE),
        ("DELETE", SUB): topic(TN.UNSUBSCRIBE),
        ("POST", f"{SUB}/skip/{{count}}"): topic(TN.SKIP),
        ("POST", f"{SUB}/skip_all"): topic(TN.SKIP),
        ("POST", f"{SUB}/expireMessages/{{seconds}}"): topic(TN.EXPIRE_MESSAGES),
        ("POST", f"{SUB}/resetcursor"): topic(TN.RESET_CURSOR),
        ("POST", f"{SUB}/resetcursor/{{timestamp}}"): topic(TN.RESET_CURSOR),
        ("GET", f"{SUB}/position/{{n}}"): topic(TN.PEEK_MESSAGES),
        ("GET", f"{SCHEMA}/schema"): topic(TN.GET_METADATA),
        ("GET", f"{SCHEMA}/schema/{{version}}"): topic(TN.GET_METADATA),
        ("GET", f"{SCHEMA}/schemas"): topic(TN.GET_METADATA),
        ("POST", f"{SCHEMA}/version"): topic(TN.GET_METADATA),
        ("POST", f"{SCHEMA}/schema"): TENANT_ADMIN,
        ("DELETE", f"{SCHEMA}/schema"): TENANT_ADMIN,
        ("POST", f"{SCHEMA}/compatibility"): TENANT_ADMIN,
    }
    for name in _NS_POLICIES:
        rules[("GET", f"{NS}/{name}")] = namespace(NO.GET_POLICIES)
        rules[("POST", f"{NS}/{name}")] = namespace(NO.SET_POLICIES)
        rules[("DELETE", f"{NS}/{name}")] = namespace(NO.SET_POLICIES)
    for name in _TOPIC_POLICIES:
        for method in ("GET", "POST", "DELETE"):
            rules[(method, f"{T}/{name}")] = topic(TN.POLICIES)
    return rules


RULES = _rules()


def rule_for(method: str, path: str) -> Access:
    """The rule of a route (its method and path pattern); a route without one is the superuser's."""
    return RULES.get((method, path), SUPERUSER)


def _tenant_of(request: HttpRequest) -> str:
    tenant = request.path_params["tenant"]
    try:
        check_named_entity("tenant", tenant)
    except InvalidTopicNameError:
        raise HttpError(412, "Tenant name is not valid") from None
    return tenant


def _namespace_of(request: HttpRequest) -> NamespaceName:
    try:
        return NamespaceName(request.path_params["tenant"], request.path_params["namespace"])
    except InvalidTopicNameError:
        raise HttpError(412, "Namespace name is not valid") from None


def _topic_of(request: HttpRequest) -> TopicName:
    segments = request.path.split("/")  # the topic segment, still encoded (as the routes read it)
    try:
        domain = TopicDomain.NON_PERSISTENT if segments[3] == "non-persistent" else TopicDomain.PERSISTENT
        return TopicName.of(
            request.path_params["tenant"], request.path_params["namespace"], url_decode(segments[6]), domain
        )
    except (InvalidTopicNameError, IndexError):
        raise HttpError(412, "Topic name is not valid") from None


async def _authorize(
    access: Access, request: HttpRequest, authz: AuthorizationService, role: str | None
) -> None:
    kind = access.kind
    if kind is Kind.AUTHENTICATED:
        return
    try:
        if kind is Kind.SUPERUSER:
            authz.check_superuser(role)
        elif kind is Kind.TENANT_ADMIN:
            await authz.check_tenant_admin(_tenant_of(request), role)
        elif kind is Kind.NAMESPACE:
            assert access.namespace_operation is not None
            await authz.check_namespace_operation(_namespace_of(request), role, access.namespace_operation)
        else:
            assert access.topic_operation is not None
            subscription = request.path_params.get("subscription")
            await authz.check_topic_operation(_topic_of(request), role, access.topic_operation, subscription)
    except AuthorizationError as exc:
        raise HttpError(403, exc.reason) from None


def principal_of(access: Access, request: HttpRequest, security: BrokerSecurity | None) -> Principal | None:
    """Who sent a request whose head check (:func:`check_access`) passed - for handlers whose answer depends
    on the role (the head check ran before the body was read, in another call). None when unauthenticated."""
    if security is None or access.kind is Kind.OPEN:
        return None
    return security.authenticate_http(request.head)


async def check_access(
    access: Access, request: HttpRequest, security: BrokerSecurity | None
) -> Principal | None:
    """Authenticate, rate-limit and authorize one admin request (401/429/403 as :class:`HttpError`)."""
    if security is None or access.kind is Kind.OPEN:
        return None
    principal = security.authenticate_http(request.head)
    security.check_admin_rate(principal, request.head)
    if security.authorization.enabled:
        await _authorize(access, request, security.authorization, principal.role)
    return principal
