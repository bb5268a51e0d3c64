"""Protocol adapters: each turns one client protocol's frames into the core's publish requests, permits and
acknowledgements, and the core's deliveries and completions into frames (Pulsar's WebSocket JSON API in
:mod:`.pulsar_ws`, the binary subprotocol in :mod:`.magnetar_v1`). Adding a protocol adds an adapter here."""
