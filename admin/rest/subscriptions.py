"""Subscription routes: ``/admin/v2/persistent/{t}/{ns}/{topic}/subscription/{sub}[/...]``.

Pulsar's subscription admin calls over the topic's managed-ledger cursors: create at ``latest`` (default),
``earliest`` or a message id (409 when it exists), delete (412 while consumers are connected unless
``force``), skip N, skip all (clear backlog), expire messages older than T seconds (one subscription or all)
or up to a message id (the body of ``POST .../expireMessages``), reset to a publish time or a message id, and
peek the n-th unacknowledged message. The message-id bodies are Pulsar's ``ResetCursorData`` as the Java
client's Jackson writes it (``excluded`` for ``isExcluded``; the older spelling is read too) or a bare
``MessageIdImpl``. After a cursor moves, the broker's dispatcher is told (``TopicHost.cursor_moved``) so
connected consumers continue from the new place. Expiring on every subscription at once needs ``consume`` on
each of them (or a tenant admin), as each per-subscription route does.

A partitioned topic addressed by its base name: create, delete, skip all, expire (by time, one subscription
or all), reset to a time and the subscription list apply to every partition (:mod:`.partitions`); skip N,
peek, reset to a message id and expire up to a message id are 405, with Pulsar's reasons, as in Pulsar.
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
    number_param,
    ok,
)
from magnetar.admin.rest.messages import message_response
from magnetar.admin.rest.models import Int32, Int64
from magnetar.admin.rest.names import (
    namespace_of,
    partition_count,
    require_namespace,
    subscription_of,
    topic_of,
)
from magnetar.admin.rest.partitions import Local, combined, each_partition
from magnetar.admin.rest.served import host_of, served_named, served_topic
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.core import first_at_or_after, is_reserved_cursor, publish_time
from magnetar.broker.wire import TopicName
from magnetar.gc import expire_cursor
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import InvalidPositionError, Position

TAG = "subscriptions"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
SUB = TOPIC + "/subscription/{subscription}"
EXPIRY_SEARCH_READS_MAX = 64


class ResetCursorData(BaseModel):
    """Pulsar's ``ResetCursorData``: ``excluded`` (Jackson's name for Lombok's ``isExcluded``) starts after
    the position instead of at it; ``isExcluded`` is accepted too."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ledgerId: Int64
    entryId: Int64
    partitionIndex: Int32 = -1
    excluded: bool = False
    isExcluded: bool = False
    batchIndex: Int32 = -1
    properties: dict[str, Any] | None = None

    @property
    def is_excluded(self) -> bool:
        return self.excluded or self.isExcluded


InitialPosition = Literal["latest", "earliest"] | ResetCursorData


class CreateQuery(QueryModel):
    authoritative: bool = False
    replicated: bool = False


class ForceQuery(QueryModel):
    force: bool = False
    authoritative: bool = False


async def _cursor(
    call: Call, *, partitioned: str | None = None
) -> tuple[TopicName, ManagedLedger, ManagedCursor]:
    name = subscription_of(call)
    topic, ml = await served_topic(call, partitioned=partitioned)
    return topic, ml, _named_cursor(ml, name)


def subscription_cursors(ml: ManagedLedger) -> dict[str, ManagedCursor]:
    """The durable cursors that are subscriptions (not the broker's own, such as ``pulsar.dedup``; the
    managed ledger knows them once their topic is loaded, and the name is reserved in any case)."""
    return {name: c for name, c in ml.subscription_cursors().items() if not is_reserved_cursor(name)}


def _named_cursor(ml: ManagedLedger, name: str) -> ManagedCursor:
    cursor = None if is_reserved_cursor(name) else ml.cursors.get(name)
    if cursor is None:
        raise AdminError(404, "Subscription not found")
    return cursor


async def _cursor_on(call: Call, topic: TopicName, name: str) -> tuple[ManagedLedger, ManagedCursor]:
    _, ml = await served_named(call, topic)
    return ml, _named_cursor(ml, name)


async def _partitions_of(call: Call) -> tuple[TopicName, int]:
    """The topic of the path and its partition count (0: not partitioned, or a partition itself)."""
    topic = topic_of(call)
    namespace_of(call)
    await require_namespace(call.context, topic.namespace_name)
    return topic, await partition_count(call.context, topic)


async def _on_every_partition(call: Call, base: TopicName, count: int, local: Local) -> HttpResponse:
    combined(await each_partition(call, base, count, local), "Subscription not found")
    return no_content()


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
    if data.is_excluded:
        position = ml.ledgers.next_position(position)
    return position


# -- create / delete -----------------------------------------------------------------------------------


async def create_subscription(call: Call) -> HttpResponse:
    name = subscription_of(call)
    topic, count = await _partitions_of(call)
    initial: InitialPosition | None = call.body
    if count == 0:
        await _create_on(call, topic, name, initial)
        return no_content()
    outcomes = await each_partition(call, topic, count, lambda p: _create_on(call, p, name, initial))
    refused = [o for o in outcomes if not o.ok and o.status != 409]
    if refused:
        raise AdminError(refused[0].status, refused[0].reason)
    if not any(o.ok for o in outcomes):
        raise AdminError(409, "Subscription already exists for topic")
    return no_content()


async def _create_on(call: Call, topic: TopicName, name: str, initial: InitialPosition | None) -> None:
    if is_reserved_cursor(name):
        raise AdminError(412, "Subscription with reserved subscription name attempted")
    _, ml = await served_named(call, topic, create=True)
    if name in ml.cursors:
        raise AdminError(409, "Subscription already exists for topic")
    if isinstance(initial, ResetCursorData):
        target = _position_of(ml, initial)
        cursor = await ml.open_cursor(name, start_at_earliest=True)
        cursor.reset(target)
        await cursor.flush()
    else:
        await ml.open_cursor(name, start_at_earliest=initial == "earliest")


async def delete_subscription(call: Call) -> HttpResponse:
    name = subscription_of(call)
    force = call.query_as(ForceQuery).force
    topic, count = await _partitions_of(call)

    async def delete_on(partition: TopicName) -> None:
        await _cursor_on(call, partition, name)
        await host_of(call).delete_subscription(partition, name, force=force)

    if count == 0:
        await delete_on(topic)
        return no_content()
    return await _on_every_partition(call, topic, count, delete_on)


async def list_subscriptions(call: Call) -> HttpResponse:
    topic, count = await _partitions_of(call)

    async def names_on(partition: TopicName) -> list[str]:
        _, ml = await served_named(call, partition)
        return sorted(subscription_cursors(ml))

    if count == 0:
        return ok(await names_on(topic))
    outcomes = await each_partition(call, topic, count, names_on)
    refused = [o for o in outcomes if not o.ok and o.status != 404]
    if refused:
        raise AdminError(refused[0].status, refused[0].reason)
    names = {str(n) for o in outcomes if o.ok and isinstance(o.body, list) for n in o.body}
    return ok(sorted(names))


# -- moving the cursor ---------------------------------------------------------------------------------


async def _moved(call: Call, topic: TopicName, cursor: ManagedCursor) -> HttpResponse:
    await cursor.flush()
    await host_of(call).cursor_moved(topic, cursor.name)
    return no_content()


async def skip(call: Call) -> HttpResponse:
    count = number_param(call, "count")
    if count < 0:
        raise AdminError(412, "Invalid number of messages to skip")
    topic, _, cursor = await _cursor(call, partitioned="Skip messages on a partitioned topic is not allowed")
    if count:
        await cursor.skip_messages(count)
    return await _moved(call, topic, cursor)


async def skip_all(call: Call) -> HttpResponse:
    name = subscription_of(call)
    topic, count = await _partitions_of(call)

    async def skip_all_on(partition: TopicName) -> None:
        _, cursor = await _cursor_on(call, partition, name)
        cursor.clear_backlog()
        await _moved(call, partition, cursor)

    if count == 0:
        await skip_all_on(topic)
        return no_content()
    return await _on_every_partition(call, topic, count, skip_all_on)


def _expire_seconds(call: Call) -> int:
    seconds = number_param(call, "seconds")
    if seconds < 0:
        raise AdminError(412, "Invalid expire time")
    return seconds


async def _expire(ml: ManagedLedger, cursor: ManagedCursor, seconds: int) -> int:
    cutoff = ml.now_ms() - seconds * 1000
    return await expire_cursor(ml, cursor, cutoff, publish_time, EXPIRY_SEARCH_READS_MAX)


async def expire_messages(call: Call) -> HttpResponse:
    seconds = _expire_seconds(call)
    name = subscription_of(call)
    topic, count = await _partitions_of(call)

    async def expire_on(partition: TopicName) -> None:
        ml, cursor = await _cursor_on(call, partition, name)
        await _expire(ml, cursor, seconds)
        await _moved(call, partition, cursor)

    if count == 0:
        await expire_on(topic)
        return no_content()
    return await _on_every_partition(call, topic, count, expire_on)


async def expire_to_position(call: Call) -> HttpResponse:
    """``expireMessages(topic, sub, messageId, isExcluded)``: acknowledge every message up to the id
    (excluded: up to the one before it); a cursor already past it does not move back, and an id beyond the
    last message expires everything."""
    data: ResetCursorData = call.body
    topic, ml, cursor = await _cursor(
        call, partitioned="Expire message at position is not supported for partitioned-topic"
    )
    try:
        position = Position(data.ledgerId, data.entryId)
    except InvalidPositionError:
        raise AdminError(412, "Unable to find position for position specified") from None
    if data.is_excluded:
        position = ml.ledgers.previous_position(position)
    position = min(position, ml.last_confirmed)
    if position > cursor.mark_delete:
        cursor.ack_cumulative(position)
    return await _moved(call, topic, cursor)


async def expire_all_subscriptions(call: Call) -> HttpResponse:
    seconds = _expire_seconds(call)
    topic, count = await _partitions_of(call)

    async def expire_all_on(partition: TopicName) -> None:
        _, ml = await served_named(call, partition)
        cursors = subscription_cursors(ml)
        await _check_consume_on_every_subscription(call, partition, list(cursors))
        for cursor in list(cursors.values()):
            await _expire(ml, cursor, seconds)
            await _moved(call, partition, cursor)

    if count == 0:
        await expire_all_on(topic)
        return no_content()
    combined(await each_partition(call, topic, count, expire_all_on), "Topic not found")
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
    timestamp = number_param(call, "timestamp")
    name = subscription_of(call)
    topic, count = await _partitions_of(call)

    async def reset_on(partition: TopicName) -> None:
        ml, cursor = await _cursor_on(call, partition, name)
        position = await first_at_or_after(ml, timestamp)
        cursor.reset(position if position is not None else ml.ledgers.next_position(ml.last_confirmed))
        await _moved(call, partition, cursor)

    if count == 0:
        await reset_on(topic)
        return no_content()
    return await _on_every_partition(call, topic, count, reset_on)


async def reset_to_position(call: Call) -> HttpResponse:
    data: ResetCursorData = call.body
    topic, ml, cursor = await _cursor(
        call, partitioned="Reset-cursor at position is not allowed for partitioned-topic"
    )
    cursor.reset(_position_of(ml, data))
    return await _moved(call, topic, cursor)


async def peek(call: Call) -> HttpResponse:
    n = number_param(call, "n")
    if n < 1:
        raise AdminError(412, "Invalid message position: it must be 1 or more")
    _, ml, cursor = await _cursor(call, partitioned="Peek messages on a partitioned topic is not allowed")
    location = await cursor.locate_unacked(n)
    if location is None:
        raise AdminError(404, "Message not found")
    entry = await ml.read_entry(location.position)
    if entry is None:
        raise AdminError(404, "Message not found")
    return message_response(entry, location.offset, location.messages)


def endpoints() -> list[Endpoint]:
    e = {307: "Redirect to the owning broker", 404: "Topic or subscription not found",
         412: "Name is not valid", 405: "Not allowed on a partitioned topic"}  # fmt: skip
    return [
        Endpoint("GET", f"{TOPIC}/subscriptions", list_subscriptions, "List subscriptions", TAG,
                 query=AuthoritativeQuery, response=list[str], status=200, errors=e),
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
        Endpoint("POST", f"{SUB}/expireMessages", expire_to_position, "Expire messages up to a message id",
                 TAG, query=AuthoritativeQuery, body=ResetCursorData, body_required=True, errors=e),
        Endpoint("POST", f"{TOPIC}/all_subscription/expireMessages/{{seconds}}", expire_all_subscriptions,
                 "Expire old messages on every subscription", TAG, query=AuthoritativeQuery, errors=e),
        Endpoint("POST", f"{SUB}/resetcursor/{{timestamp}}", reset_to_time, "Reset to a publish time (ms)",
                 TAG, query=AuthoritativeQuery, errors=e),
        Endpoint("POST", f"{SUB}/resetcursor", reset_to_position, "Reset to a message id", TAG,
                 query=AuthoritativeQuery, body=ResetCursorData, body_required=True, errors=e),
        Endpoint("GET", f"{SUB}/position/{{n}}", peek, "Peek the n-th unacknowledged message", TAG,
                 query=AuthoritativeQuery, status=200, content_type="application/octet-stream", errors=e),
    ]  # fmt: skip
