"""Retention trimming (broker side) and garbage collection / entry-log compaction (bookie side)."""
