"""A plain TCP connection's reader dispatches what it read as one burst: the disk store syncs the burst's
journal records when it ends, on the reader's own task, and the answers go out from there (connection.py)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from fixtures.bookie_server import KEY, bookie_settings, packaged

from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.server import serve_bookie
from magnetar.bookkeeper.bookie.storage.engine import open_ledger_store
from magnetar.bookkeeper.bookie.storage.journal_files import JournalWriterFile
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark
from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol
from magnetar.bookkeeper.protocol.messages import AddRequest, AddResponse, ReadRequest, ReadResponse
from magnetar.bookkeeper.protocol.status import BookieStatus


async def exchange(port: int, requests: list[AddRequest | ReadRequest]) -> list[Any]:
    """Send ``requests`` in one write on a fresh connection; their answers, in arrival order."""
    proto = ClientProtocol()
    frames = bytearray()
    for request in requests:
        proto.send_into(frames, request)
    answers: list[Any] = []
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(frames)
        with trio.fail_after(10):
            while len(answers) < len(requests):
                event = proto.next_event()
                if event is NEED_DATA:
                    proto.receive_data(await stream.receive_some(65536))
                else:
                    answers.append(event)
    return answers


def adds(ledger_id: int, count: int) -> list[AddRequest | ReadRequest]:
    return [
        AddRequest(entry_id + 1, ledger_id, entry_id, KEY, packaged(ledger_id, entry_id), False, False)
        for entry_id in range(count)
    ]


@pytest.fixture
def sync_tasks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the trio task of each journal sync (a thread sync has none)."""
    names: list[str] = []
    real = JournalWriterFile.write_and_sync

    def recording(self: JournalWriterFile, data: bytes | bytearray) -> LogMark:
        try:
            names.append(trio.lowlevel.current_task().name)
        except RuntimeError:
            names.append("thread")
        return real(self, data)

    monkeypatch.setattr(JournalWriterFile, "write_and_sync", recording)
    return names


async def test_adds_read_together_are_synced_and_answered_by_the_connections_reader(
    make_settings: Any, sync_tasks: list[str]
) -> None:
    async with open_ledger_store(make_settings()) as store, trio.open_nursery() as nursery:
        _, port = await nursery.start(serve_bookie, BookieCore(store), bookie_settings())
        before = len(sync_tasks)
        answers = await exchange(port, adds(7, 40))
        assert [(type(a), a.status, a.entry_id) for a in answers] == [
            (AddResponse, BookieStatus.EOK, entry_id) for entry_id in range(40)
        ]
        new_syncs = sync_tasks[before:]
        assert new_syncs
        assert all("BookieConnection.run" in name for name in new_syncs), new_syncs
        assert store.journal.stats.records >= 41  # the ledger's key and the 40 entries
        read = await exchange(port, [ReadRequest(99, 7, -1)])
        assert isinstance(read[0], ReadResponse)
        assert (read[0].status, read[0].entry_id, read[0].body) == (BookieStatus.EOK, 39, packaged(7, 39))
        nursery.cancel_scope.cancel()


async def test_connections_writing_at_once_are_all_answered_and_durable(make_settings: Any) -> None:
    settings = make_settings()
    async with open_ledger_store(settings, final_checkpoint=False) as store, trio.open_nursery() as nursery:
        _, port = await nursery.start(serve_bookie, BookieCore(store), bookie_settings())
        results: dict[int, list[Any]] = {}

        async def client(ledger_id: int) -> None:
            results[ledger_id] = await exchange(port, adds(ledger_id, 25))

        async with trio.open_nursery() as clients:
            for ledger_id in range(1, 5):
                clients.start_soon(client, ledger_id)
        assert sorted(results) == [1, 2, 3, 4]
        for ledger_id, answers in results.items():
            assert [(a.status, a.ledger_id, a.entry_id) for a in answers] == [
                (BookieStatus.EOK, ledger_id, entry_id) for entry_id in range(25)
            ]
        nursery.cancel_scope.cancel()
    async with open_ledger_store(settings) as store:  # what was answered survives: the journal replays it
        for ledger_id in range(1, 5):
            assert store.read_entry(ledger_id, -1) == packaged(ledger_id, 24)
