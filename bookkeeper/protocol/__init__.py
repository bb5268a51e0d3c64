"""The bookie wire protocol: sans-IO frame codec, request/response messages, entry digests."""
