"""Seams shared by every layer: clock and randomness enter through these interfaces so that the
replication protocol can run under a seeded simulation with a fake clock."""

from magnetar.bookkeeper.runtime.clock import Clock, SystemClock, TrioClock
from magnetar.bookkeeper.runtime.limits import LimitExceeded

__all__ = ["Clock", "LimitExceeded", "SystemClock", "TrioClock"]
