"""Permissions: who may produce, consume or run functions on a namespace or a topic (Pulsar's
``grant-permission`` / ``revoke-permission`` / ``permissions``).

* ``GET .../namespaces/{t}/{ns}/permissions`` -> ``{"role": ["produce", "consume"]}``;
* ``POST .../namespaces/{t}/{ns}/permissions/{role}`` with a JSON array of actions (``produce``, ``consume``,
  ``functions``, ``sources``, ``sinks``, ``packages``) grants them (replacing the role's earlier grant);
  ``DELETE`` revokes every action of the role;
* ``POST .../namespaces/{t}/{ns}/permissionOnSubscription/{subscription}`` with a JSON array of roles: only
  those roles may consume on that subscription; ``DELETE .../permissionOnSubscription/{subscription}/{role}``;
* ``GET .../persistent/{t}/{ns}/{topic}/permissions`` -> the namespace's grants united with the topic's;
  ``POST``/``DELETE .../permissions/{role}`` grant and revoke on the topic itself (412 "Permissions are not
  set at the topic level" when revoking a role granted only on the namespace).

Grants live in the namespace's policies (``auth_policies``), changed by compare-and-set (409 on a race). Only
a tenant admin or a superuser may read or change them (:mod:`.access`). They can be set while authorization
is off, and take effect once it is on.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from magnetar.admin.rest.framework import AdminError, Call, Endpoint, no_content, ok
from magnetar.admin.rest.names import namespace_of, topic_of
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.security import (
    ROLE_BYTES_MAX,
    AuthAction,
    AuthorizationService,
    AuthorizationSettings,
    check_role_name,
    parse_actions,
)

TAG = "permissions"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
Actions = list[AuthAction]
Roles = list[Annotated[str, Field(min_length=1, max_length=ROLE_BYTES_MAX)]]


def authorization_of(call: Call) -> AuthorizationService:
    security = call.context.security
    if security is not None:
        return security.authorization
    return AuthorizationService(call.context.policies, AuthorizationSettings(), authentication_enabled=False)


def _actions(call: Call) -> frozenset[AuthAction]:
    try:
        return parse_actions(call.body)
    except ValueError as exc:
        raise AdminError(400, str(exc)) from None


def _role(call: Call) -> str:
    role = call.param("role")
    check_role_name(role)
    return role


async def get_namespace_permissions(call: Call) -> HttpResponse:
    return ok(await authorization_of(call).namespace_permissions(namespace_of(call)))


async def grant_namespace_permission(call: Call) -> HttpResponse:
    namespace, role = namespace_of(call), _role(call)
    await authorization_of(call).grant_namespace_permission(namespace, role, _actions(call))
    return no_content()


async def revoke_namespace_permission(call: Call) -> HttpResponse:
    await authorization_of(call).revoke_namespace_permission(namespace_of(call), _role(call))
    return no_content()


async def grant_subscription_permission(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    roles = [str(role) for role in call.body]
    await authorization_of(call).grant_subscription_permission(namespace, call.param("subscription"), roles)
    return no_content()


async def revoke_subscription_permission(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await authorization_of(call).revoke_subscription_permission(
        namespace, call.param("subscription"), _role(call)
    )
    return no_content()


async def get_topic_permissions(call: Call) -> HttpResponse:
    return ok(await authorization_of(call).topic_permissions(topic_of(call)))


async def grant_topic_permission(call: Call) -> HttpResponse:
    topic, role = topic_of(call), _role(call)
    await authorization_of(call).grant_topic_permission(topic, role, _actions(call))
    return no_content()


async def revoke_topic_permission(call: Call) -> HttpResponse:
    await authorization_of(call).revoke_topic_permission(topic_of(call), _role(call))
    return no_content()


def endpoints() -> list[Endpoint]:
    e404 = {404: "Namespace does not exist", 412: "Namespace name is not valid"}
    e_set = {**e404, 400: "Invalid auth action", 409: "Concurrent modification"}
    return [
        Endpoint("GET", f"{NS}/permissions", get_namespace_permissions, "Permissions on a namespace", TAG,
                 response=dict[str, list[str]], status=200, errors=e404),
        Endpoint("POST", f"{NS}/permissions/{{role}}", grant_namespace_permission,
                 "Grant a role actions on a namespace", TAG, body=Actions, body_required=True,
                 errors=e_set),
        Endpoint("DELETE", f"{NS}/permissions/{{role}}", revoke_namespace_permission,
                 "Revoke a role's actions on a namespace", TAG, errors=e_set),
        Endpoint("POST", f"{NS}/permissionOnSubscription/{{subscription}}", grant_subscription_permission,
                 "Only these roles may consume on a subscription", TAG, body=Roles, body_required=True,
                 errors=e_set),
        Endpoint("DELETE", f"{NS}/permissionOnSubscription/{{subscription}}/{{role}}",
                 revoke_subscription_permission, "Remove a role from a subscription's roles", TAG,
                 errors=e_set),
        Endpoint("GET", f"{TOPIC}/permissions", get_topic_permissions, "Effective permissions on a topic",
                 TAG, response=dict[str, list[str]], status=200, errors=e404),
        Endpoint("POST", f"{TOPIC}/permissions/{{role}}", grant_topic_permission,
                 "Grant a role actions on a topic", TAG, body=Actions, body_required=True, errors=e_set),
        Endpoint("DELETE", f"{TOPIC}/permissions/{{role}}", revoke_topic_permission,
                 "Revoke a role's actions on a topic", TAG,
                 errors={**e_set, 412: "Permissions are not set at the topic level"}),
    ]  # fmt: skip
