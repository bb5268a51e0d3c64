"""Ledger passwords of managed ledgers (Pulsar's ``managedLedgerPassword``): new ledgers get the configured
password and digest type, the bookies refuse adds and fencing reads without its master key, and ledgers
written with another password - the empty one of earlier versions - stay readable and recoverable."""

from __future__ import annotations

import contextlib

import trio
from fixtures.client import InProcessBookies

from magnetar.bookkeeper.client import BookKeeper, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.bookkeeper.protocol.digest import Digester, DigestType, master_key
from magnetar.bookkeeper.protocol.messages import AddRequest, ReadRequest, Response
from magnetar.bookkeeper.protocol.status import BookieStatus
from magnetar.managed_ledger.errors import ManagedLedgerFencedError
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.ledger_state import State
from magnetar.managed_ledger.settings import ManagedLedgerSettings

EMPTY = ManagedLedgerSettings(
    ensemble_size=3, write_quorum=3, ack_quorum=2, min_ledger_rollover_time_min=0, mark_delete_rate_per_s=1000
)
SECRET = EMPTY.model_copy(update={"password": b"s3cret"})
CLIENT = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)


async def test_ledgers_of_the_empty_password_recover_under_a_new_password(
    client_metadata: MemoryMetadataStore, in_process_bookies: InProcessBookies
) -> None:
    """The upgrade: a broker with a password takes over a topic whose ledgers (and cursor ledger) were written
    with the empty password, and was left open by a crashed owner: it fences and recovers them with the
    password they record, reads every entry, and writes on in a new ledger with its own password."""
    name = "t/ns/persistent/upgrade"
    transport = in_process_bookies.transport
    async with (
        open_bookkeeper(client_metadata, transport, CLIENT) as old_bk,
        open_bookkeeper(client_metadata, transport, CLIENT) as new_bk,
        open_managed_ledger_factory(old_bk, client_metadata, EMPTY) as old_factory,
        open_managed_ledger_factory(new_bk, client_metadata, SECRET) as new_factory,
    ):
        old = await old_factory.open(name)
        written = [await old.add_entry(f"m{i}".encode()) for i in range(20)]
        cursor = await old.open_cursor("sub", start_at_earliest=True)
        for position in written[:5]:
            cursor.ack(position)
        await cursor.flush()
        old_ledger_id = written[-1].ledger_id
        assert (await new_bk.get_ledger_metadata(old_ledger_id)).password == b""

        new = await new_factory.open(name)  # recovery open of the old owner's ledger
        recovered = new.cursors["sub"]
        assert recovered.mark_delete == written[4]
        entries = await new.read_entries(written[0], 100)
        assert [e.data for e in entries] == [f"m{i}".encode() for i in range(20)]
        after = await new.add_entry(b"after the upgrade")
        assert after.ledger_id != old_ledger_id
        assert (await new_bk.get_ledger_metadata(after.ledger_id)).password == b"s3cret"
        with contextlib.suppress(ManagedLedgerFencedError):
            await old.add_entry(b"stale owner")
        assert old.state is State.FENCED


async def test_the_bookies_refuse_the_empty_master_key_on_a_protected_ledger(
    client_metadata: MemoryMetadataStore, in_process_bookies: InProcessBookies, bookkeeper_client: BookKeeper
) -> None:
    """What a client that may reach the bookies but lacks the password can do to a topic's ledger: no add,
    no fencing read, no recovery add - and the topic's owner goes on writing to the same ledger."""
    async with open_managed_ledger_factory(bookkeeper_client, client_metadata, SECRET) as factory:
        ml = await factory.open("t/ns/persistent/protected")
        first = await ml.add_entry(b"before")
        ledger_id = first.ledger_id
        bookie = in_process_bookies.ids[0]
        wrong = master_key(b"")
        body = Digester(DigestType.CRC32C).package(
            ledger_id, first.entry_id + 1, first.entry_id, 0, b"forged"
        )
        attempts = {
            "add": AddRequest(1, ledger_id, first.entry_id + 1, wrong, body),
            "recovery add": AddRequest(2, ledger_id, first.entry_id + 1, wrong, body, recovery=True),
            "fencing read": ReadRequest(3, ledger_id, -1, fence=True, master_key=wrong),
            "recovery read": ReadRequest(
                4, ledger_id, first.entry_id, fence=True, high_priority=True, master_key=wrong
            ),
        }
        for what, request in attempts.items():
            answers: list[Response] = []
            done = trio.Event()

            def answered(response: object, into: list[Response] = answers, event: trio.Event = done) -> None:
                assert isinstance(response, Response)
                into.append(response)
                event.set()

            in_process_bookies.transport.send(bookie, request, answered)
            await done.wait()
            assert answers[0].status is BookieStatus.EUA, what
        second = await ml.add_entry(b"after")
        assert second.ledger_id == ledger_id, "not fenced: the topic did not move to a new ledger"
        assert [e.data for e in await ml.read_entries(first, 10)] == [b"before", b"after"]


async def test_new_ledgers_take_the_configured_digest_type(
    client_metadata: MemoryMetadataStore, bookkeeper_client: BookKeeper
) -> None:
    settings = SECRET.model_copy(update={"digest_type": DigestType.HMAC})
    async with open_managed_ledger_factory(bookkeeper_client, client_metadata, settings) as factory:
        ml = await factory.open("t/ns/persistent/mac")
        position = await ml.add_entry(b"x")
        metadata = await bookkeeper_client.get_ledger_metadata(position.ledger_id)
        assert metadata.digest_type is DigestType.HMAC
        assert [e.data for e in await ml.read_entries(position, 1)] == [b"x"]
        assert "s3cret" not in repr(metadata)
        assert "s3cret" not in repr(settings)
