"""Pulsar's WebSocket JSON API: the producer, consumer and reader endpoints, their query parameters and
JSON messages (the ``magnetar.v1`` subprotocol is served on the same endpoints, see
:mod:`magnetar.broker.protocols.magnetar_v1`)."""
