"""Client sessions' front door: one protocol-neutral module (:mod:`.front_door`) owns the WebSocket upgrade,
authentication and authorization, binding the session to its topic, the read loop, the redelivery timers,
close and drain; a protocol adapter (:mod:`magnetar.broker.protocols`), chosen by the client's subprotocol
from :mod:`.registry`, encodes and handles the frames."""
