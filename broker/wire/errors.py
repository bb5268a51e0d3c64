"""The broker layer's base exception, and the errors of the names and ids that clients parse too.

:class:`BrokerError` is the base of every exception of the broker layer - its wire formats, its core, its
service and its protocol adapters. It lives here, at the bottom of the layer, so that the errors of the wire
formats (which a client imports without the server) are broker errors as well. The entry format and the
``magnetar.v1`` frames keep their errors beside their codecs (:class:`~.entry_format.CorruptEntryError`,
:class:`~.magnetar_v1.BinaryFrameError`); the service's refusals are in :mod:`magnetar.broker.core.errors`.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every broker-layer exception."""


class InvalidTopicNameError(BrokerError, ValueError):
    """A topic, namespace or tenant name breaks Pulsar's naming rules (Pulsar: ``IllegalArgumentException``;
    400 on a WebSocket upgrade, 412 "Topic name is not valid" on the admin API)."""


class InvalidSubscriptionNameError(InvalidTopicNameError):
    """A subscription name Magnetar cannot store (see :func:`.topic_name.check_subscription_name`): 400 on a
    WebSocket upgrade, 412 "Subscription name is not valid" on the admin API."""


class UnsupportedTopicDomainError(InvalidTopicNameError):
    """A ``non-persistent://`` topic where only persistent topics are served (a managed ledger's name, a
    persistent admin route)."""


class InvalidMessageIdError(BrokerError, ValueError):
    """Bytes or text that do not decode to a MessageId (Pulsar: ``IOException`` from ``fromByteArray``)."""
