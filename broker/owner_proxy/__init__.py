"""The owner proxy: a WebSocket session (Pulsar's JSON API or ``magnetar.v1``) opened on a broker that does
not own its topic is served through that broker, and follows the topic when it moves - as Pulsar's
WebSocket service serves any topic through its client. Browsers' WebSocket does not follow redirects, so
answering 307 (what a non-owner did before) left them without a way in.

Design: a **frame-level proxy**. The broker the client reached checks the client exactly as for a session it
serves itself (authentication, then authorization, then the parameters: the same answers, before anything
else), and only then, on finding another broker owns the topic, opens an internal WebSocket client session to
the owner with the client's request target as received, its subprotocols and its own credentials
(:mod:`.upstream`, over :mod:`magnetar.bookkeeper.runtime.http.ws_client`; TLS when the owner only serves
TLS, or ``broker_client_tls_enabled``), marked with ``x-magnetar-proxied-by`` so the owner never proxies
again. The owner checks the client again - the same role, the same topic and subscription - so the hop never
lets a client do more than it could on the owner directly, and no broker role needs rights on tenants'
topics. The owner's answer to the upgrade becomes the answer to the client (a refusal passes through with
its status and reason). From then on frames are relayed unchanged in both directions (:mod:`.relay`): the
owner does all the protocol work, and the proxy parses only the little it must to keep its promises when the
owner changes (:mod:`magnetar.broker.protocols.relay_tracking`, the trackers each protocol adapter gives).

Why frame-level rather than a second copy of the session logic over a broker-to-broker protocol: one
implementation of each protocol stays the truth (the owner's), nothing protocol-specific enters the core,
and the proxy's cost per message is one frame decode and encode per direction, measured in
``tests/bench/RESULTS.md``.

Following moves. When the upstream session ends with 1001 (unload, shedding, split, the owner shutting
down), 1006 (connection dropped: owner killed) or 1011-1014, the proxy fails back what has an unknown outcome
(a producer's messages not yet answered: ``send-error:8`` with the same ``context``, or a ``SEND_ERROR``),
looks the topic up again with the broker's own lookup (which places an unowned bundle and never names an
owner whose process does not answer), and reconnects with a bounded back-off and a bounded total deadline;
the client's session stays open. Client frames that arrive meanwhile wait in a bounded buffer and are
forwarded in order. Consumers re-grant pull-mode permits; readers restart after the last message they
delivered. If the deadline passes, the client's session is closed with 1001 so it looks the topic up again;
if the new owner refuses the client's credentials (a token that expired meanwhile), with 1008 and the
owner's reason.
Any other close by the owner (1000 after an unsubscribe, a 4xxx session error) is passed to the client.

Limits (:mod:`magnetar.broker.owner_proxy.settings`): ``ws_proxy_sessions_max``,
``ws_proxy_connect_timeout_ms``, ``ws_proxy_redirects_max``, ``ws_proxy_reconnect_backoff_initial_ms`` /
``..._max_ms``, ``ws_proxy_reconnect_deadline_ms``, ``ws_proxy_buffer_messages_max`` / ``..._bytes_max`` and
``ws_proxy_pending_messages_max``. What the proxy did is counted for ``/metrics`` (:mod:`.metrics`; a
partitioned session counts once as a session, its partitions' moves and failed-back requests each).

Partitioned topics (:mod:`.fanout`): partitions hash to bundles by their own names, so a topic's partitions
may have several owners. A session on a partitioned topic with any partition not served here is served
through one upstream session per partition (this broker's own partitions through a loopback session), each
an ordinary relay following its partition's moves; the fan-out routes publishes by key, acks by the
partition in their message id, merges a split SEND's receipts into one and keeps pull-mode permits
(``ws_proxy_partition_prefetch_messages`` per partition) so the client never gets more than it permitted.
"""
