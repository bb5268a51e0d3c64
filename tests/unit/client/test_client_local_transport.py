"""The in-process transport keeps the transport contract: never answers inside ``send``, exactly once,
connection loss fails what a bookie has not answered; and closing the client fails pending adds."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
from fixtures.client import InProcessBookies

from magnetar.bookkeeper.client import BKError, BookKeeper, ClientClosedError, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.local_transport import open_local_transport
from magnetar.bookkeeper.client.transport import FailureReason, TransportFailure
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.protocol.messages import ReadRequest, ReadResponse, Request, Response
from magnetar.bookkeeper.protocol.status import BookieStatus


class NoBursts:
    def begin_burst(self) -> None:
        pass

    def end_burst(self) -> None:
        pass


class Silent(NoBursts):
    """A bookie that takes requests and never answers."""

    def handle(self, request: Request, respond: object) -> None:
        pass


class Echo(NoBursts):
    def handle(self, request: Request, respond: object) -> None:
        assert isinstance(request, ReadRequest)
        respond(ReadResponse(request.request_id, BookieStatus.ENOENTRY, request.ledger_id, request.entry_id))  # type: ignore[operator]


async def test_answers_come_later_and_exactly_once() -> None:
    async with open_local_transport({"echo": Echo(), "silent": Silent()}) as transport:
        answers: list[Response | TransportFailure] = []
        transport.send("echo", ReadRequest(1, 1, 0), answers.append)
        transport.send("nowhere", ReadRequest(2, 1, 0), answers.append)
        assert answers == [], "never synchronously from inside send"
        transport.send("silent", ReadRequest(3, 1, 0), answers.append)
        while len(answers) < 2:
            await trio.lowlevel.checkpoint()
        transport.disconnect("silent")
        transport.disconnect("silent")
        while len(answers) < 3:
            await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
        assert sum(isinstance(a, ReadResponse) for a in answers) == 1
        assert [a.reason for a in answers if isinstance(a, TransportFailure)] == [
            FailureReason.CONNECT,
            FailureReason.CLOSED,
        ]
        assert len(answers) == 3


async def test_closing_the_client_fails_pending_adds(
    client_metadata: MemoryMetadataStore, in_process_bookies: InProcessBookies
) -> None:
    outcomes: list[int | BKError] = []
    settings = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
    async with open_bookkeeper(client_metadata, in_process_bookies.transport, settings) as bk:
        lh = await bk.create_ledger()
        for store in in_process_bookies.stores.values():
            store.auto_sync = False
        lh.add_entry_nowait(b"never durable", outcomes.append)
    assert len(outcomes) == 1
    assert isinstance(outcomes[0], ClientClosedError)
    with pytest.raises(ClientClosedError):
        await bk.create_ledger()


async def test_bookkeeper_client_fixture_is_shared(bookkeeper_client: BookKeeper) -> None:
    assert bookkeeper_client.settings.ack_quorum == 2
