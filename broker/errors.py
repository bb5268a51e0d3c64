"""The broker layer's exceptions. Each carries what it becomes on the wire: an HTTP status for a refused
WebSocket upgrade or admin call, or a Pulsar WebSocket error code (``send-error:N`` / close code)."""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every broker-layer exception."""


class InvalidTopicNameError(BrokerError, ValueError):
    """A topic, namespace or tenant name breaks Pulsar's naming rules (Pulsar: ``IllegalArgumentException``;
    400 on a WebSocket upgrade, 412 "Topic name is not valid" on the admin API)."""


class UnsupportedTopicDomainError(InvalidTopicNameError):
    """A ``non-persistent://`` topic: recognised, but Magnetar only stores persistent topics."""


class InvalidMessageIdError(BrokerError, ValueError):
    """Bytes or text that do not decode to a MessageId (Pulsar: ``IOException`` from ``fromByteArray``)."""
