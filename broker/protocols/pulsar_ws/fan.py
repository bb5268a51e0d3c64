"""A Pulsar JSON producer fanned out over a partitioned topic's partitions by the owner proxy
(:mod:`magnetar.broker.protocols.fan`): each publish request goes to the partition of its ``key`` (or,
keyless, by ``messageRoutingMode``), chosen by the broker's own
:class:`~magnetar.broker.core.routing.PartitionRouter`; the answers come back unchanged (a partition
session's message ids carry its partition index)."""

from __future__ import annotations

import orjson

from magnetar.broker.core.routing import PartitionRouter
from magnetar.broker.protocols.fan import Fan, Frame, Routed


class JsonProducerFan(Fan):
    """A Pulsar JSON producer: each publish request to its key's (or the routing mode's) partition."""

    def __init__(self, router: PartitionRouter[int]) -> None:
        super().__init__(len(router.producers))
        self._router = router

    def from_client(self, message: Frame) -> Routed:
        key: str | None = None
        if isinstance(message, str):
            try:
                document = orjson.loads(message)
            except orjson.JSONDecodeError:
                document = None
            if isinstance(document, dict) and isinstance(document.get("key"), str):
                key = document["key"]
        # a frame that is no publish request goes to some partition, whose session answers the error
        return Routed(partitions=[(self._router.route(key), message)])
