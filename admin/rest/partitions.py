"""A call on a partitioned topic, addressed by its base name, applied to every partition.

Pulsar's broker answers ``createSubscription``, ``getSubscriptions``, ``deleteSubscription``,
``skipAllMessages``, ``expireMessages``, ``resetCursor`` (to a time), ``unload`` and
``deletePartitionedTopic`` on ``persistent://t/ns/x`` by making the same call on ``x-partition-0`` ...
``x-partition-<N-1>`` through its own admin client, so each partition is handled by the broker that owns it.
:func:`each_partition` does the same: a partition this broker serves is handled here (``local``), any other
is sent to its owner over HTTP (:mod:`.peer_http`: the same method, the rest of the path, the query with
``authoritative=true``, the body and the caller's ``Authorization``), one partition after the other.

Each partition's outcome is kept (:class:`Outcome`); :func:`combined` turns them into one answer, as Pulsar
does: the first refusal other than "not found" is the answer (412 for a subscription with connected
consumers ...), a partition that lacks the topic or the subscription is passed over, and when every partition
lacked it the answer is 404 with the operation's reason. Partitions are handled one after the other and a
refusal does not undo what earlier partitions did - as in Pulsar, whose per-partition calls are not atomic
either.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from magnetar.admin.rest.framework import AdminError, Call, error_for
from magnetar.admin.rest.peer_http import PeerRequestError, request
from magnetar.admin.rest.served import host_of
from magnetar.bookkeeper.runtime.http import HttpError
from magnetar.broker.wire import TopicName

log = logging.getLogger(__name__)

TOPIC_SEGMENTS = 7
"""``/admin/v2/persistent/{tenant}/{namespace}/{topic}``: the segments up to and including the topic."""


@dataclass(frozen=True, slots=True)
class Outcome:
    partition: TopicName
    status: int
    reason: str = ""
    body: Any = None
    """The JSON answer of a call that returns one (``getSubscriptions``), else None."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


Local = Callable[[TopicName], Awaitable[Any]]


def _reason(raw: bytes) -> str:
    try:
        document = json.loads(raw)
    except ValueError:
        return raw[:200].decode(errors="replace")
    return str(document.get("reason", "")) if isinstance(document, dict) else ""


async def _forward(call: Call, partition: TopicName, owner: str, suffix: str | None) -> Outcome:
    rest = "/".join(call.request.path.split("/")[TOPIC_SEGMENTS:]) if suffix is None else suffix
    pairs = [(k, v) for k, v in call.request.query.pairs if k != "authoritative"]
    pairs.append(("authoritative", "true"))
    url = f"{owner.rstrip('/')}/admin/v2/{partition.rest_path}" + (f"/{rest}" if rest else "")
    url += "?" + urlencode(pairs)
    settings = call.context.settings
    head = call.request.head
    try:
        status, body = await request(
            call.request.method,
            url,
            authorization=head.header("authorization"),
            timeout_s=settings.peer_request_timeout_ms / 1000,
            body_bytes_max=settings.peer_response_bytes_max,
            body=call.request.body,
            content_type=head.header("content-type"),
        )
    except PeerRequestError as exc:
        log.warning("%s of partition %s not reached: %s", call.request.method, partition, exc)
        return Outcome(partition, 503, f"Partition {partition} could not be reached: {exc}")
    if 200 <= status < 300:
        try:
            document = json.loads(body) if body.strip() else None
        except ValueError:
            document = None
        return Outcome(partition, status, body=document)
    return Outcome(partition, status, _reason(body))


async def each_partition(
    call: Call, base: TopicName, count: int, local: Local, *, suffix: str | None = None
) -> list[Outcome]:
    """Apply the call to partitions ``0 .. count-1`` of ``base`` (see the module docstring). A partition
    another broker owns gets the same request at ``<partition>/<suffix>`` (``suffix`` None: the rest of the
    call's own path; ``""``: the partition itself)."""
    host = host_of(call)
    outcomes = []
    for index in range(count):
        partition = base.partition(index)
        owner = await host.owner_url(partition, authoritative=False)
        if owner is not None:
            outcomes.append(await _forward(call, partition, owner, suffix))
            continue
        try:
            result = await local(partition)
        except HttpError as exc:
            outcomes.append(Outcome(partition, exc.status, exc.reason))
            continue
        except Exception as exc:
            mapped = error_for(exc)
            if mapped is None:
                raise
            outcomes.append(Outcome(partition, mapped.status, mapped.reason))
            continue
        outcomes.append(Outcome(partition, 200, body=result))
    return outcomes


def combined(outcomes: Sequence[Outcome], not_found: str) -> list[Outcome]:
    """The partitions that did the call; raises the answer when the call failed as a whole (see above)."""
    refused = [o for o in outcomes if not o.ok and o.status != 404]
    if refused:
        raise AdminError(refused[0].status, refused[0].reason)
    done = [o for o in outcomes if o.ok]
    if outcomes and not done:
        raise AdminError(404, not_found)
    return done
