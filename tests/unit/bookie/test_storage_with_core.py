"""BookieCore (the request logic) over the disk engine: answers wait for durability; fences stick."""

from __future__ import annotations

from typing import Any

import trio

from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.storage.engine import open_ledger_store
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Response,
    WriteLacRequest,
)
from magnetar.bookkeeper.protocol.status import BookieStatus

KEY = b"k" * 20


class Answers:
    def __init__(self) -> None:
        self.responses: list[Response] = []
        self._changed = trio.Event()

    def respond(self, response: Response) -> None:
        self.responses.append(response)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, count: int) -> None:
        while len(self.responses) < count:
            await self._changed.wait()


async def test_adds_are_answered_after_the_journal_sync_and_survive_restart(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings()
    answers = Answers()
    async with open_ledger_store(settings, final_checkpoint=False) as store:
        core = BookieCore(store)
        for entry_id in range(5):
            core.handle(AddRequest(entry_id, 7, entry_id, KEY, make_entry(7, entry_id)), answers.respond)
        assert answers.responses == []  # nothing is answered before the fdatasync
        await answers.wait_for(5)
        assert {r.status for r in answers.responses} == {BookieStatus.EOK}
    async with open_ledger_store(settings) as store:
        core = BookieCore(store)
        core.handle(ReadRequest(10, 7, -1), answers.respond)
        last = answers.responses[-1]
        assert isinstance(last, ReadResponse)
        assert (last.status, last.entry_id, last.body) == (BookieStatus.EOK, 4, make_entry(7, 4))


async def test_a_fencing_read_is_answered_once_durable_and_blocks_later_adds(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings()
    answers = Answers()
    async with open_ledger_store(settings, final_checkpoint=False) as store:
        core = BookieCore(store)
        core.handle(AddRequest(1, 8, 0, KEY, make_entry(8, 0)), answers.respond)
        core.handle(ReadRequest(2, 8, 0, fence=True, master_key=KEY), answers.respond)
        core.handle(AddRequest(3, 8, 1, KEY, make_entry(8, 1)), answers.respond)
        await answers.wait_for(3)
        by_id = {r.request_id: r for r in answers.responses}
        assert by_id[1].status is BookieStatus.EOK
        assert by_id[2].status is BookieStatus.EOK
        assert by_id[3].status is BookieStatus.EFENCED
    async with open_ledger_store(settings) as store:
        core = BookieCore(store)
        core.handle(AddRequest(4, 8, 1, KEY, make_entry(8, 1)), answers.respond)
        core.handle(AddRequest(5, 8, 1, KEY, make_entry(8, 1), recovery=True), answers.respond)
        await answers.wait_for(5)
        assert answers.responses[3].status is BookieStatus.EFENCED  # fencing survived the restart
        assert answers.responses[4].status is BookieStatus.EOK


async def test_lac_and_bookie_info_through_the_core(make_settings: Any, make_entry: Any) -> None:
    def probe(path: object) -> DiskUsage:
        return DiskUsage(total_bytes=1000, free_bytes=400)

    answers = Answers()
    async with open_ledger_store(make_settings(), disk_probe=probe) as store:
        core = BookieCore(store)
        core.handle(AddRequest(1, 9, 0, KEY, make_entry(9, 0)), answers.respond)
        await answers.wait_for(1)
        core.handle(WriteLacRequest(2, 9, 0, KEY, b"explicit"), answers.respond)
        await answers.wait_for(2)
        core.handle(ReadLacRequest(3, 9), answers.respond)
        core.handle(GetBookieInfoRequest(4), answers.respond)
        lac = answers.responses[2]
        assert isinstance(lac, ReadLacResponse)
        assert (lac.status, lac.lac_body) == (BookieStatus.EOK, b"explicit")
        assert lac.last_entry_body == make_entry(9, 0)
        info = answers.responses[3]
        assert isinstance(info, GetBookieInfoResponse)
        assert (info.total_disk_bytes, info.free_disk_bytes) == (1000, 400)
