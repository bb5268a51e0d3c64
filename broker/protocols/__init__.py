"""Protocol adapters: each turns one client protocol's frames into the core's publish requests, permits and
acknowledgements, and the core's deliveries and completions into frames (Pulsar's WebSocket JSON API in
:mod:`.pulsar_ws`, the binary subprotocol in :mod:`.magnetar_v1`). The modules at this level are what the
adapters share (:mod:`.adapter`, :mod:`.outbound`, :mod:`.ws_errors`). Adding a protocol adds an adapter
folder here and one line in :mod:`magnetar.broker.sessions.registry` (``docs/architecture.md`` §1.2)."""
