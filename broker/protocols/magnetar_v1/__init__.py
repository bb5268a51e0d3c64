"""The broker side of the binary WebSocket subprotocol ``magnetar.v1`` (its frames are in
:mod:`magnetar.broker.wire.magnetar_v1`): SEND frames as publish requests, MESSAGES records as deliveries."""
