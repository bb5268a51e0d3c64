"""Magnetar's lowest layer: BookKeeper-style replicated ledger storage.

Subpackages, lowest first: ``runtime`` (clock/randomness seams), ``protocol`` (sans-IO wire codec),
``metadata`` (the metadata store), ``bookie`` (the storage node) and ``client`` (the replication client).
"""
