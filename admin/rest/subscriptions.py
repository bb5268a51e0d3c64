"""Subscription routes: ``/admin/v2/persistent/{t}/{ns}/{topic}/subscription/{sub}[/...]``.

Pulsar's subscription admin calls over the topic's managed-ledger cursors: create at ``latest`` (default),
``earliest`` or a message id (409 when it exists), delete (412 while consumers are connected unless
``force``), skip N, skip all (clear backlog), expire messages older than T seconds (one subscription or all),
reset to a publish time or a message id, and peek the n-th unacknowledged message. After a cursor moves,
the broker's dispatcher is told (``TopicHost.cursor_moved``) so connected consumers continue from the new
place. Expiring on every subscription at once needs ``consume`` on each of them (or a tenant admin), as each
per-subscription route does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from magnetar.admin.rest.framework import (
    AdminError,
    AuthoritativeQuery,
    Call,
    Endpoint,
    QueryModel,
    no_content,
)
from magnetar.admin.rest.messages import entry_response, first_at_or_after, publish_time
from magnetar.admin.rest.models import Int32, Int64
from magnetar.admin.rest.names import subscription_of
from magnetar.admin.rest.served import host_of, served_topic
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.topic_name import TopicName
from magnetar.gc.expiry import expire_cursor
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import InvalidPositionError, Position

TAG = "subscriptions"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
SUB = TOPIC + "/subscription/{subscription}"
EXPIRY_SEARCH_READS_MAX = 64


class ResetCursorData(BaseModel):
    """Pulsar's ``ResetCursorData``; ``isExcluded`` starts after the position instead of at it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ledgerId: Int64
    entryId: Int64
    partitionIndex: Int32 = -1
    isExcluded: bool = False
    batchIndex: Int32 = -1
    properties: dict[str, Any] | None = None


InitialPosition = Literal["latest", "earliest"] | ResetCursorData


class CreateQuery(QueryModel):
    authoritative: bool = False
    replicated: bool = False


class ForceQuery(QueryModel):
    force: bool = False
    authoritative: bool = False


async def _cursor(call: Call) -> tuple[TopicName, ManagedLedger, ManagedCursor]:
    name = subscription_of(call)
    topic, ml = await served_topic(call)
    cursor = ml.cursors.get(name)
    if cursor is None:
        raise AdminError(404, "Subscription not found")
    return topic, ml, cursor


def _position_of(ml: ManagedLedger, data: ResetCursorData) -> Position:
    if data.ledgerId == -1 and data.entryId == -1:  # MessageId.earliest
        first = ml.ledgers.first_position()
        return first if first is not None else ml.ledgers.next_position(ml.last_confirmed)
    if data.ledgerId >= 2**63 - 1:  # MessageId.latest
        return ml.ledgers.next_position(ml.last_confirmed)
    try:
        position = Position(data.ledgerId, data.entryId)
    except InvalidPositionError:
        raise AdminError(412, "Unable to find position for position specified") from None
    if data.isExcluded:
        position = ml.ledgers.next_position(position)
    return position


# -- create / delete -----------------------------------------------------------------------------------


async def create_subscription(call: Call) -> HttpResponse:
    name = subscription_of(call)
    _, ml = await served_topic(call, create=True)
    if name in ml.cursors:
        raise AdminError(409, "Subscription already exists for topic")
    initial: InitialPosition | None = call.body
    if isinstance(initial, ResetCursorData):
        target = _position_of(ml, initial)
        cursor = await ml.open_cursor(name, start_at_earliest=True)
        cursor.reset(target)
        await cursor.flush()
    else:
        await ml.open_cursor(name, start_at_earliest=initial == "earliest")
    return no_content()


async def delete_subscription(call: Call) -> HttpResponse:
    topic, _, cursor = await _cursor(call)
    await host_of(call).delete_subscription(topic, cursor.name, force=call.query_as(ForceQuery).force)
    return no_content()


# -- moving the cursor ---------------------------------------------------------------------------------


async def _moved(call: Call, topic: TopicName, cursor: ManagedCursor) -> HttpResponse:
    await cursor.flush()
    await host_of(call).cursor_moved(topic, cursor.name)
    return no_content()


async def skip(call: Call) -> HttpResponse:
    try:
        count = int(call.param("count"))
    except ValueError:
        raise AdminError(412, "Invalid number of messages to skip") from None
    if count < 0:
        raise AdminError(412, "Invalid number of messages to skip")
    topic, _, cursor = await _cursor(call)
    if count:
        cursor.skip(count)
    return await _moved(call, topic, cursor)


async def skip_all(call: Call) -> HttpResponse:
    topic, _, cursor = await _cursor(call)
    cursor.clear_backlog()
    return await _moved(call, topic, cursor)


def _expire_seconds(call: Call) -> int:
    try:
        seconds = int(call.param("seconds"))
    except ValueError:
        raise AdminError(412, "Invalid expire time") from None
    if seconds < 0:
        raise AdminError(412, "Invalid expire time")
    return seconds


async def _expire(ml: ManagedLedger, cursor: ManagedCursor, seconds: int) -> int:
    cutoff = ml.now_ms() - seconds * 1000
    return await expire_cursor(ml, cursor, cutoff, publish_time, EXPIRY_SEARCH_READS_MAX)


async def expire_messages(call: Call) -> HttpResponse:
    seconds = _expire_seconds(call)
    topic, ml, cursor = await _cursor(call)
    await _expire(ml, cursor, seconds)
    return await _moved(call, topic, cursor)


async def expire_all_subscriptions(call: Call) -> HttpResponse:
    seconds = _expire_seconds(call)
    topic, ml = await served_topic(call)
    await _check_consume_on_every_subscription(call, topic, list(ml.cursors))
    for cursor in list(ml.cursors.values()):
        await _expire(ml, cursor, seconds)
        await _moved(call, topic, cursor)
    return no_content()


async def _check_consume_on_every_subscription(call: Call, topic: TopicName, names: list[str]) -> None:
    """Expiring on every subscription needs what expiring on each one needs: ``consume`` on each (a
    subscription restricted with ``permissionOnSubscription`` only for its roles), or a tenant admin. The
    route's rule checked ``consume`` on the topic only; Pulsar stops there too, which lets a role empty a
    subscription it may not consume. Checked before any cursor moves: all or nothing."""
    security = call.context.security
    if security is None or not security.authorization.enabled:
        return
    authz = security.authorization
    role = call.principal.role if call.principal is not None else None
    if await authz.is_tenant_admin(topic.tenant, role):
        return
    refused = [name for name in sorted(names) if not await authz.can_consume(topic, role, name)]
    if refused:
        listed = ", ".join(repr(name) for name in refused)
        raise AdminError(
            403,
            f"Role {role!r} is not authorized to expire_messages on topic {topic.full_name} "
            f"with subscription {listed}",
        )


async def reset_to_time(call: Call) -> HttpResponse:
    try:
        timestamp = int(call.param("timestamp"))
    except ValueError:
        raise AdminError(412, "Unable to find position for timestamp specified") from None
    topic, ml, cursor = await _cursor(call)
    position = await first_at_or_after(ml, timestamp)
    cursor.reset(position if position is not None else ml.ledgers.next_position(ml.last_confirmed))
    return await _moved(call, topic, cursor)


async def reset_to_position(call: Call) -> HttpResponse:
    data: ResetCursorData = call.body
    topic, ml, cursor = await _cursor(call)
    cursor.reset(_position_of(ml, data))
    return await _moved(call, topic, cursor)


async def peek(call: Call) -> HttpResponse:
    try:
        n = int(call.param("n"))
    except ValueError:
        raise AdminError(412, "Invalid message position") from None
    if n < 1:
        raise AdminError(412, "Invalid message position: it must be 1 or more")
    topic, ml, cursor = await _cursor(call)
    if n > cursor.backlog():
        raise AdminError(404, "Message not found")
    position = ml.ledgers.position_after_skipping(cursor.mark_delete, n)
    entry = await ml.read_entry(position)
    if entry is None:
        raise AdminError(404, "Message not found")
    return entry_response(entry, topic.partition_index)


def endpoints() -> list[Endpoint]:
    e = {307: "Redirect to the owning broker", 404: "Topic or subscription not found",
         412: "Name is not valid", 405: "Not allowed on a partitioned topic"}  # fmt: skip
    return [
        Endpoint("PUT", SUB, create_subscription, "Create a subscription", TAG, query=CreateQuery,
                 body=InitialPosition, errors={**e, 409: "Subscription already exists for topic"}),
        Endpoint("DELETE", SUB, delete_subscription, "Delete a subscription", TAG, query=ForceQuery,
                 errors={**e, 412: "Subscription has active connected consumers"}),
        Endpoint("POST", f"{SUB}/skip/{{count}}", skip, "Skip messages", TAG, query=AuthoritativeQuery,
                 errors=e),
        Endpoint("POST", f"{SUB}/skip_all", skip_all, "Skip every message (clear backlog)", TAG,
                 query=AuthoritativeQuery, errors=e),
        Endpoint("POST", f"{SUB}/expireMessages/{{seconds}}", expire_messages, "Expire old messages", TAG,
                 query=AuthoritativeQuery, errors=e),
        Endpoint("POST", f"{TOPIC}/all_subscription/expireMessages/{{seconds}}", expire_all_subscriptions,
                 "Expire old messages on every subscription", TAG, query=AuthoritativeQuery, errors=e),
        Endpoint("POST", f"{SUB}/resetcursor/{{timestamp}}", reset_to_time, "Reset to a publish time (ms)",
                 TAG, query=AuthoritativeQuery, errors=e),
        Endpoint("POST", f"{SUB}/resetcursor", reset_to_position, "Reset to a message id", TAG,
                 query=AuthoritativeQuery, body=ResetCursorData, body_required=True, errors=e),
        Endpoint("GET", f"{SUB}/position/{{n}}", peek, "Peek the n-th unacknowledged message", TAG,
                 query=AuthoritativeQuery, status=200, content_type="application/octet-stream", errors=e),
    ]  # fmt: skip
