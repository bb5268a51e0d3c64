"""What the topic and subscription routes need from the broker: :class:`TopicHost`.

The admin routes work on a topic's managed ledger directly (stats, messages, cursors, trimming); what only
the broker knows - who owns the topic's bundle, which producers and consumers are connected, the traffic
rates - comes through this protocol. The broker implements it (an adapter over its service) and passes it in
:class:`~.context.AdminContext`; the topic routes are registered only when one is given.

Ownership (Pulsar's ``validateTopicOwnership``): :meth:`TopicHost.owner_url` answers ``None`` when this
broker serves the topic - it owned the bundle or has just acquired it - and otherwise the HTTP URL of the
broker that does, which the route answers with a 307 carrying ``authoritative=true``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar.broker.wire import TopicName
from magnetar.managed_ledger.ledger import ManagedLedger


@dataclass(frozen=True, slots=True)
class SubscriptionTraffic:
    """Per-subscription figures only the dispatcher knows (Pulsar's ``SubscriptionStats`` fields)."""

    type: str = "Exclusive"
    msgRateOut: float = 0.0
    msgThroughputOut: float = 0.0
    bytesOutCounter: int = 0
    msgOutCounter: int = 0
    msgRateRedeliver: float = 0.0
    unackedMessages: int = 0
    msgDelayed: int = 0
    blockedSubscriptionOnUnackedMsgs: bool = False
    """Entries held back for delayed delivery."""
    consumers: list[dict[str, Any]] = field(default_factory=list)
    dispatchThrottled: dict[str, int] = field(default_factory=dict)
    """Pulsar's ``dispatchThrottled{Msg,Bytes}EventsBy*Limit`` counters, by field name."""


@dataclass(frozen=True, slots=True)
class TopicTraffic:
    """Per-topic figures only the broker knows (Pulsar's ``TopicStats`` traffic fields)."""

    msgRateIn: float = 0.0
    msgThroughputIn: float = 0.0
    msgRateOut: float = 0.0
    msgThroughputOut: float = 0.0
    bytesInCounter: int = 0
    msgInCounter: int = 0
    bytesOutCounter: int = 0
    msgOutCounter: int = 0
    publishers: list[dict[str, Any]] = field(default_factory=list)
    subscriptions: dict[str, SubscriptionTraffic] = field(default_factory=dict)
    ownerBroker: str = ""
    publishRateLimitedTimes: int = 0
    deduplicationStatus: str = "Disabled"


class TopicHost(Protocol):
    async def owner_url(self, topic: TopicName, *, authoritative: bool, tls: bool = False) -> str | None:
        """None when this broker serves ``topic`` (acquiring its bundle if nobody owns it); else the owner's
        HTTP URL (its HTTPS URL for a request that came over TLS, when the owner serves TLS)."""
        ...

    async def load(self, topic: TopicName, *, create: bool) -> ManagedLedger | None:
        """The topic's open managed ledger (loading the topic on this broker), or None when the topic does
        not exist and ``create`` is false."""
        ...

    async def delete(self, topic: TopicName, *, force: bool) -> None:
        """Delete the topic and its data; :class:`~.framework.AdminError` 412 "Topic has active
        producers/subscriptions" while clients are connected, unless ``force`` (which disconnects them)."""
        ...

    async def delete_subscription(self, topic: TopicName, subscription: str, *, force: bool) -> None:
        """Delete a durable subscription; 412 "Subscription has active connected consumers" unless
        ``force``."""
        ...

    async def cursor_moved(self, topic: TopicName, subscription: str) -> None:
        """An admin call moved the cursor (reset, skip, expire): the dispatcher re-reads from it."""
        ...

    async def unload(self, topic: TopicName) -> None:
        """Close the topic here and release it; the next lookup may place it on any broker."""
        ...

    def traffic(self, topic: TopicName) -> TopicTraffic: ...
