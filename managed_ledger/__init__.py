"""Managed ledgers: a topic's storage as a sequence of ledgers plus named cursors."""
