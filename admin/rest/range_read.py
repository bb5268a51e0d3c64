"""Range reads for pipelines: ``GET /admin/v2/persistent/{t}/{ns}/{topic}/entries``.

Query: ``from=L:E`` (first entry, inclusive; default the earliest stored), ``to=L:E`` (last entry, inclusive;
default the last confirmed entry), ``maxEntries=N`` (default and bound ``RANGE_ENTRIES_MAX``),
``frameVersion=V`` (1, the default; 2: message frames that also carry the producer name and sequence id; 3:
each stored entry forwarded as it is, without any per-message work on the broker).
The owning broker answers (307 otherwise) with a chunked ``application/x-magnetar-entries`` stream of the
messages of the entries in the range, in order, ending with one *end frame*. At most ``maxEntries`` entries
and about ``RANGE_BYTES_MAX`` bytes are sent per request (the entry that crosses the byte budget is the last
one); the end frame says where to continue.

The framing (its versions, and how they stay compatible) is documented and implemented sans-IO in
:mod:`magnetar.admin.range_frames`, shared with the Spark source; its names are re-exported here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import Field

from magnetar.admin.range_frames import (
    FRAME_BYTES_MAX,
    FRAME_VERSION_MAX,
    FrameDecoder,
    FrameError,
    RangeEnd,
    RangeMessage,
    encode_end_frame,
    encode_entry_frame,
    encode_message_frame,
)
from magnetar.admin.rest.framework import AdminError, Call, Endpoint, QueryModel
from magnetar.admin.rest.served import served_topic
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.wire import CorruptEntryError, decode_entry
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import InvalidPositionError, Position

CONTENT_TYPE = "application/x-magnetar-entries"
RANGE_ENTRIES_MAX = 10_000
RANGE_BYTES_MAX = 16 * 1024 * 1024
READ_BATCH_ENTRIES = 100

__all__ = [
    "CONTENT_TYPE",
    "FRAME_BYTES_MAX",
    "RANGE_BYTES_MAX",
    "RANGE_ENTRIES_MAX",
    "FrameDecoder",
    "FrameError",
    "RangeEnd",
    "RangeMessage",
    "encode_end_frame",
    "encode_message_frame",
    "endpoints",
    "read_range",
    "stream_range",
]

# -- the endpoint --------------------------------------------------------------------------------------


POSITION_PATTERN = r"^(-1|[0-9]{1,18}):(-1|[0-9]{1,18})$"


class RangeQuery(QueryModel):
    from_: str | None = Field(default=None, alias="from", pattern=POSITION_PATTERN)
    to: str | None = Field(default=None, pattern=POSITION_PATTERN)
    maxEntries: int = Field(default=RANGE_ENTRIES_MAX, ge=1, le=RANGE_ENTRIES_MAX)
    frameVersion: int = Field(default=1, ge=1, le=FRAME_VERSION_MAX)
    authoritative: bool = False


def _parse(text: str | None, name: str) -> Position | None:
    if text is None:
        return None
    try:
        return Position.parse(text)
    except InvalidPositionError:
        raise AdminError(400, f"Invalid query parameter '{name}': expected ledgerId:entryId") from None


def _frames_of(ledger: int, entry: int, data: bytes | memoryview, version: int) -> bytes:
    try:
        decoded = decode_entry(data)
    except CorruptEntryError as exc:
        raise FrameError(f"entry {ledger}:{entry} cannot be decoded: {exc}") from exc
    size = len(decoded.messages) if decoded.batched else 0
    index = (lambda i: i) if decoded.batched else (lambda i: -1)
    return b"".join(
        encode_message_frame(RangeMessage(ledger, entry, index(i), size, m.publish_time_ms, m.event_time_ms,
                                          m.key, m.properties, m.payload, m.producer_name, m.sequence_id),
                             version)
        for i, m in enumerate(decoded.messages)
    )  # fmt: skip


async def stream_range(
    ml: ManagedLedger, start: Position, last: Position, max_entries: int, version: int = 1
) -> AsyncIterator[bytes]:
    """The frames of the entries ``start..last`` (at most ``max_entries``), one chunk per read batch."""
    position, sent, sent_bytes = ml.ledgers.normalize(start), 0, 0
    while sent < max_entries and sent_bytes < RANGE_BYTES_MAX and position <= last:
        batch = await ml.read_entries(position, min(READ_BATCH_ENTRIES, max_entries - sent))
        batch = [e for e in batch if e.position <= last]
        if not batch:
            break
        chunk = []
        for entry in batch:
            ledger_id, entry_id = entry.position.ledger_id, entry.position.entry_id
            if version >= 3:
                frames = encode_entry_frame(ledger_id, entry_id, entry.stored)
            else:
                frames = _frames_of(ledger_id, entry_id, entry.data, version)
            chunk.append(frames)
            sent += 1
            sent_bytes += len(frames)
            position = ml.ledgers.next_position(entry.position)
            if sent_bytes >= RANGE_BYTES_MAX:
                break
        yield b"".join(chunk)
    complete = position > last or position > ml.last_confirmed
    yield encode_end_frame(RangeEnd((position.ledger_id, position.entry_id), sent, complete))


async def read_range(call: Call) -> HttpResponse:
    query = call.query_as(RangeQuery)
    start = _parse(query.from_, "from")
    end = _parse(query.to, "to")
    _, ml = await served_topic(call)
    first = ml.ledgers.first_position() or ml.ledgers.next_position(ml.last_confirmed)
    start = max(start or first, first)
    last = min(end, ml.last_confirmed) if end is not None else ml.last_confirmed
    body = stream_range(ml, start, last, query.maxEntries, query.frameVersion)
    return HttpResponse(200, (("content-type", CONTENT_TYPE),), body)


def endpoints() -> list[Endpoint]:
    return [
        Endpoint("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/entries", read_range,
                 "Stream a range of entries (framing in the module docs)", "topics", query=RangeQuery,
                 status=200, content_type=CONTENT_TYPE,
                 errors={307: "Redirect to the owning broker", 404: "Topic not found"}),
    ]  # fmt: skip
