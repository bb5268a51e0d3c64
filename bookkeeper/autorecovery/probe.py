"""Asking a live bookie whether it still holds the entries it should (BookKeeper's ``LedgerChecker``).

For every closed fragment naming the bookie, a sample of the entries striped to it is read from that bookie
alone: the first and the last always, and ``percentage`` % of the others (evenly spaced, so the sample is
the same every time). The verdict:

* ``MISSING`` - some entry was answered NoSuchEntry / NoSuchLedger: the bookie lost data it was trusted with
  (a wiped or replaced disk, or an entry that only reached the ack quorum when it was written);
* ``PRESENT`` - every sampled entry came back with a valid digest;
* ``UNKNOWN`` - no verdict (timeouts, errors, a corrupt copy): nothing is concluded from silence.

The open last fragment of a ledger is never probed: entries above its LAC may legitimately be absent, and
reading a failed bookie for an open ledger's LAC is what stalled BookKeeper's replication (BookKeeper #2755).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import trio

from magnetar.bookkeeper.autorecovery.copier import LedgerKeys, call
from magnetar.bookkeeper.autorecovery.fragments import count_on_index, entries_on_index, fragments_of
from magnetar.bookkeeper.client import BookieId, ClientContext, LedgerMetadata, next_request_id
from magnetar.bookkeeper.protocol import BookieStatus, DigestError, ReadRequest, ReadResponse

PROBES_IN_FLIGHT_MAX = 16


class Verdict(enum.Enum):
    PRESENT = "present"
    MISSING = "missing"
    UNKNOWN = "unknown"


def sample_entries(
    first: int, last: int, index: int, size: int, quorum: int, percentage: int
) -> Iterator[int]:
    """First, last and about ``percentage`` % of the entries the bookie at ``index`` stores in
    ``first..last``."""
    total = count_on_index(first, last, index, size, quorum)
    if total == 0:
        return
    if percentage >= 100:
        yield from entries_on_index(first, last, index, size, quorum)
        return
    wanted = max(0, (total - 2) * percentage // 100)
    step = max(1, (total - 2) // wanted) if wanted else 0
    for position, entry_id in enumerate(entries_on_index(first, last, index, size, quorum)):
        if position in (0, total - 1) or (step and position % step == 0):
            yield entry_id


async def probe_bookie(
    ctx: ClientContext, keys: LedgerKeys, metadata: LedgerMetadata, bookie: BookieId, percentage: int
) -> Verdict:
    """Does ``bookie`` hold its sampled entries of the closed fragments that name it?"""
    verdicts: list[Verdict] = []
    limiter = trio.CapacityLimiter(PROBES_IN_FLIGHT_MAX)

    async def one(token: object, entry_id: int) -> None:
        try:
            verdicts.append(await _probe_entry(ctx, keys, bookie, entry_id))
        finally:
            limiter.release_on_behalf_of(token)

    async with trio.open_nursery() as nursery:
        for fragment in fragments_of(metadata):
            if fragment.last_entry_id is None or bookie not in fragment.ensemble:
                continue
            index = fragment.ensemble.index(bookie)
            for entry_id in sample_entries(
                fragment.first_entry_id, fragment.last_entry_id, index, metadata.ensemble_size,
                metadata.write_quorum, percentage,
            ):  # fmt: skip
                if Verdict.MISSING in verdicts:
                    break
                token = object()
                await limiter.acquire_on_behalf_of(token)
                nursery.start_soon(one, token, entry_id)
    if Verdict.MISSING in verdicts:
        return Verdict.MISSING
    if Verdict.UNKNOWN in verdicts:
        return Verdict.UNKNOWN
    return Verdict.PRESENT


async def _probe_entry(ctx: ClientContext, keys: LedgerKeys, bookie: BookieId, entry_id: int) -> Verdict:
    answer = await call(ctx, bookie, ReadRequest(next_request_id(), keys.ledger_id, entry_id), ctx.rpc.reads)
    if not isinstance(answer, ReadResponse):
        return Verdict.UNKNOWN
    if answer.status in (BookieStatus.ENOENTRY, BookieStatus.ENOLEDGER):
        return Verdict.MISSING
    if answer.status is not BookieStatus.EOK:
        return Verdict.UNKNOWN
    try:
        keys.digester.unpack(answer.body, keys.ledger_id, entry_id)
    except DigestError:
        return Verdict.UNKNOWN
    return Verdict.PRESENT
