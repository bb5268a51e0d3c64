"""What the owner proxy did, for ``/metrics`` (Magnetar's own names: Pulsar's WebSocket service exports no
such figures).

The relay only adds to plain integers (:class:`ProxyCounters`); the families are read from them when the
broker is scraped (:class:`ProxyMetrics`, a :class:`~magnetar.broker.metrics.exposition.MetricsSource` the
broker's HTTP application adds). Every row carries the broker's ``cluster`` label, as the broker-wide families
do.

* ``magnetar_ws_proxy_sessions`` - client sessions being served through this broker now;
* ``magnetar_ws_proxy_upstreams`` - upstream sessions held to owners now: one per session, one per partition
  of a partitioned topic's session (what ``ws_proxy_sessions_max`` bounds);
* ``magnetar_ws_proxy_sessions_opened_total`` - client sessions accepted through the proxy;
* ``magnetar_ws_proxy_sessions_refused_total`` - client upgrades the proxy answered with an error itself
  (``ws_proxy_sessions_max`` reached, or no owner reachable before the deadline); a refusal by the owner
  (401, 404, ...) is the owner's and not counted;
* ``magnetar_ws_proxy_moves_total`` - times a session followed its topic to a new upstream session (unload,
  shedding, split, owner failure);
* ``magnetar_ws_proxy_gave_up_total`` - sessions closed 1001 because no owner could be reached within
  ``ws_proxy_reconnect_deadline_ms``;
* ``magnetar_ws_proxy_failed_back_total`` - requests answered with an error result by the proxy: their
  outcome became unknown when the upstream session ended, or the reconnect buffer was full;
* ``magnetar_ws_proxy_frames_to_owner_total`` / ``magnetar_ws_proxy_frames_to_client_total`` - frames relayed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from magnetar.broker.metrics import Family, FamilyRows, Kind, broker_wide


@dataclass(slots=True)
class ProxyCounters:
    sessions: int = 0
    upstreams: int = 0
    """Upstream sessions held (one per proxied session, one per partition of a partitioned one): what
    ``ws_proxy_sessions_max`` bounds."""
    sessions_opened: int = 0
    sessions_refused: int = 0
    moves: int = 0
    gave_up: int = 0
    failed_back: int = 0
    frames_to_owner: int = 0
    frames_to_client: int = 0


PROXY_FAMILIES: tuple[tuple[Family, Callable[[ProxyCounters], int]], ...] = (
    (
        broker_wide("magnetar_ws_proxy_sessions", Kind.GAUGE, "Sessions served through this broker"),
        lambda c: c.sessions,
    ),
    (
        broker_wide("magnetar_ws_proxy_upstreams", Kind.GAUGE, "Upstream sessions held to owners"),
        lambda c: c.upstreams,
    ),
    (
        broker_wide("magnetar_ws_proxy_sessions_opened", Kind.COUNTER, "Sessions accepted through the proxy"),
        lambda c: c.sessions_opened,
    ),
    (
        broker_wide(
            "magnetar_ws_proxy_sessions_refused",
            Kind.COUNTER,
            "Upgrades the proxy refused itself (session bound reached, no owner reachable)",
        ),
        lambda c: c.sessions_refused,
    ),
    (
        broker_wide("magnetar_ws_proxy_moves", Kind.COUNTER, "Sessions that followed their topic"),
        lambda c: c.moves,
    ),
    (
        broker_wide(
            "magnetar_ws_proxy_gave_up",
            Kind.COUNTER,
            "Sessions closed 1001: no owner reachable within ws_proxy_reconnect_deadline_ms",
        ),
        lambda c: c.gave_up,
    ),
    (
        broker_wide(
            "magnetar_ws_proxy_failed_back",
            Kind.COUNTER,
            "Requests answered with an error by the proxy (outcome unknown, or reconnect buffer full)",
        ),
        lambda c: c.failed_back,
    ),
    (
        broker_wide("magnetar_ws_proxy_frames_to_owner", Kind.COUNTER, "Client frames relayed to the owner"),
        lambda c: c.frames_to_owner,
    ),
    (
        broker_wide("magnetar_ws_proxy_frames_to_client", Kind.COUNTER, "Owner frames relayed to the client"),
        lambda c: c.frames_to_client,
    ),
)


class ProxyMetrics:
    def __init__(self, cluster: str, counters: ProxyCounters) -> None:
        self._cluster = cluster
        self._counters = counters

    def families(self) -> Iterator[FamilyRows]:
        for family, read in PROXY_FAMILIES:
            yield family, [((self._cluster,), read(self._counters))]
