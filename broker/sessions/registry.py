"""Where protocol adapters are registered: the session front door (:mod:`.front_door`) serves each WebSocket
session with the first adapter whose subprotocol the client offers, else the one registered without a
subprotocol. Every adapter is served on the WebSocket endpoints (the paths of :mod:`.front_door`); adding a
protocol is one adapter folder under :mod:`magnetar.broker.protocols` and one line here."""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.broker.protocols.adapter import ProtocolAdapter
from magnetar.broker.protocols.magnetar_v1.adapter import MagnetarV1Adapter
from magnetar.broker.protocols.pulsar_ws.adapter import PulsarWsAdapter

ADAPTERS: tuple[ProtocolAdapter, ...] = (
    MagnetarV1Adapter(),
    PulsarWsAdapter(),  # a client offering no registered subprotocol: Pulsar's JSON API
)


def adapter_for(subprotocols: Sequence[str]) -> ProtocolAdapter:
    """The adapter of a session whose client offered ``subprotocols``."""
    default: ProtocolAdapter | None = None
    for adapter in ADAPTERS:
        if adapter.subprotocol is None:
            default = default or adapter
        elif adapter.subprotocol in subprotocols:
            return adapter
    assert default is not None, "an adapter without a subprotocol serves clients that offer none"
    return default


CONNECTION_ADAPTERS: tuple[str, ...] = ("pulsar_binary",)
"""Adapters of protocols with a listener of their own instead of the WebSocket endpoints: Pulsar's binary
protocol, served by :mod:`.binary_door` on ``broker_service_port``."""
