"""The broker's side of producer backlog quotas (Pulsar's ``producer_request_hold`` / ``producer_exception``).

The retention service (``magnetar.gc``) decides when a topic's backlog exceeds its quota; the broker must not
import it, so the composition root hands the broker a :class:`PublishGate` (``BrokerService.publish_gate``).
Producers ask it before publishing:

* ``"hold"``: the publish waits until the topic is within quota again (the WebSocket session stops reading
  frames meanwhile, so the client is slowed down by TCP, as Pulsar holds the producer's requests);
* ``"reject"``: a new producer is refused at the upgrade (503, Pulsar's
  ``ProducerBlockedQuotaExceededException``) and a publish of an existing one fails with ``send-error``.

``any_exceeded`` lets the hot path skip the per-topic check while no topic is over its quota.
"""

from __future__ import annotations

from typing import Protocol

ADMISSION_OK = "ok"
ADMISSION_HOLD = "hold"
ADMISSION_REJECT = "reject"


class PublishGate(Protocol):
    @property
    def any_exceeded(self) -> bool: ...

    def admission(self, ml_name: str) -> str:
        """``"ok"``, ``"hold"`` or ``"reject"`` for a publish to the topic of managed ledger ``ml_name``."""
        ...

    async def wait_until_within_quota(self, ml_name: str) -> None: ...
