"""The broker: the protocol-neutral core (:mod:`.core`: topics, producers, subscriptions, dispatch), the
client protocols' adapters (:mod:`.protocols`), the session front door (:mod:`.sessions`), the owner proxy
(:mod:`.owner_proxy`) and the wire formats clients share (:mod:`.wire`); at this level the service that
composes them, the HTTP app, topic lookup, bundle ownership and the load manager, policies, authentication
and authorization, metrics and non-persistent topics.

This module imports nothing: it runs on every import of :mod:`.wire`, which clients import without the
server."""
