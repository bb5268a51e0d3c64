"""Magnetar's lowest layer: BookKeeper-style replicated ledger storage.

Subpackages, lowest first: ``runtime`` (what every process shares: the clock and randomness seams, listening
sockets and descriptor limits, rate limits, the sync thread, transition tables, flat settings; the
HTTP/WebSocket server in ``runtime.http``; authentication and TLS in ``runtime.auth``), ``protocol`` (the
sans-IO bookie wire codec), ``metadata`` (the metadata store and its backends), ``bookie`` (the storage node
and its REST API), ``client`` (the replication client) and ``autorecovery`` (the auditor and the replication
workers that heal under-replicated ledgers, on the client). Nothing here imports a layer above.
"""
