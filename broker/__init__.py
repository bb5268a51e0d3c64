"""The broker: topic ownership, producers, subscriptions, the WebSocket API and the HTTP server."""
