"""What every layer and process shares. Seams: the clock and randomness enter through these interfaces, so
the replication protocol can run under a seeded simulation with a fake clock. Processes: listening sockets
and the holder of a busy port, descriptor limits, rate limits and connection counts, a send timer, a thread
for blocking syncs, giving memory back and pacing bulk work, an event-loop monitor. Rules: transition
tables, flat settings over nested models, the "a limit on everything" helpers. Subpackages: :mod:`.http`
(the HTTP/WebSocket server) and :mod:`.auth` (authentication, tokens, TLS).

Its face imports none of its subpackages: importing :mod:`.http` or :mod:`.auth` runs this module first."""

from magnetar.bookkeeper.runtime.address_settings import AdvertisedAddressSettings, advertised_host_for
from magnetar.bookkeeper.runtime.clock import Clock, SystemClock, TrioClock
from magnetar.bookkeeper.runtime.descriptors import (
    check_connection_limits,
    process_connection_slots,
    raise_nofile_limit,
)
from magnetar.bookkeeper.runtime.flat_settings import flat_names, nest_flat, nested_model, rename_old, renamed
from magnetar.bookkeeper.runtime.gather import IOV_MAX, Buffer, rest_after
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
    "IOV_MAX",
    "LOOP_MONITOR_ENV",
    "AdvertisedAddressSettings",
    "Buffer",
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
    "advertised_host_for",
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
    "rest_after",
]
