"""The broker's protocol-neutral core: topics, producers, subscriptions, dispatch and consumers.

It speaks in publish requests (:mod:`.publish`), deliveries under flow control (:mod:`.delivery`) and
acknowledgements as positions (:mod:`.subscriber`); it never sees a frame. Each client protocol is an adapter
in :mod:`magnetar.broker.protocols`; the wire formats clients share are in :mod:`magnetar.broker.wire`.
"""
