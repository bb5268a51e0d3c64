"""Seams shared by every layer: clock and randomness enter through these interfaces so that the
replication protocol can run under a seeded simulation with a fake clock."""

from magnetar.bookkeeper.runtime.clock import Clock, SystemClock, TrioClock
from magnetar.bookkeeper.runtime.descriptors import (
    check_connection_limits,
    process_connection_slots,
    raise_nofile_limit,
)
from magnetar.bookkeeper.runtime.flat_settings import flat_names, nest_flat, nested_model, rename_old, renamed
from magnetar.bookkeeper.runtime.limits import LimitExceeded
from magnetar.bookkeeper.runtime.listen import ListenError, check_ports_free, open_listeners
from magnetar.bookkeeper.runtime.loop_monitor import ENVIRONMENT_VARIABLE as LOOP_MONITOR_ENV
from magnetar.bookkeeper.runtime.loop_monitor import install_from_environment
from magnetar.bookkeeper.runtime.memory import process_trimmer
from magnetar.bookkeeper.runtime.pacing import GiveWay
from magnetar.bookkeeper.runtime.rate_limit import (
    ConnectionCounter,
    KeyedRateLimiter,
    RateLimitedError,
    TokenBucket,
)
from magnetar.bookkeeper.runtime.send_timer import SendTimer
from magnetar.bookkeeper.runtime.sync_thread import SyncThread, open_sync_thread
from magnetar.bookkeeper.runtime.transitions import IllegalTransitionError, TransitionTable

__all__ = [
    "LOOP_MONITOR_ENV",
    "Clock",
    "ConnectionCounter",
    "GiveWay",
    "IllegalTransitionError",
    "KeyedRateLimiter",
    "LimitExceeded",
    "ListenError",
    "RateLimitedError",
    "SendTimer",
    "SyncThread",
    "SystemClock",
    "TokenBucket",
    "TransitionTable",
    "TrioClock",
    "check_connection_limits",
    "check_ports_free",
    "flat_names",
    "install_from_environment",
    "nest_flat",
    "nested_model",
    "open_listeners",
    "open_sync_thread",
    "process_connection_slots",
    "process_trimmer",
    "raise_nofile_limit",
    "rename_old",
    "renamed",
]
