"""The TCP transport against a real bookie server (MemoryLedgerStore) over 127.0.0.1 sockets."""

from __future__ import annotations

import trio
import trio.testing
from fixtures.bookie_server import (
    KEY,
    OTHER_KEY,
    add_request,
    bookie_settings,
    call,
    packaged,
    read_request,
    running_bookie,
    send,
)

from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.server import serve_bookie
from magnetar.bookkeeper.bookie.storage.memory_store import MemoryLedgerStore
from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import next_request_id
from magnetar.bookkeeper.protocol.messages import (
    AddResponse,
    ErrorResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadResponse,
    WriteLacRequest,
    WriteLacResponse,
)
from magnetar.bookkeeper.protocol.status import BookieStatus

OK = BookieStatus.EOK


async def test_pipelined_adds_and_reads() -> None:
    async with running_bookie() as bk, open_tcp_transport() as transport:
        adds = [send(transport, bk.bookie_id, add_request(1, e)) for e in range(500)]
        results = [await c.wait() for c in adds]
        assert all(isinstance(r, AddResponse) and r.status is OK for r in results)
        assert [r.entry_id for r in results if isinstance(r, AddResponse)] == list(range(500))
        reads = [send(transport, bk.bookie_id, read_request(1, e)) for e in range(500)]
        for entry_id, c in enumerate(reads):
            response = await c.wait()
            assert isinstance(response, ReadResponse)
            assert response.status is OK
            assert response.body == packaged(1, entry_id)
        last = await call(transport, bk.bookie_id, read_request(1, -1))
        assert isinstance(last, ReadResponse)
        assert (last.status, last.entry_id) == (OK, 499)
        missing = await call(transport, bk.bookie_id, read_request(1, 500))
        assert isinstance(missing, ReadResponse)
        assert missing.status is BookieStatus.ENOENTRY
        no_ledger = await call(transport, bk.bookie_id, read_request(2, 0))
        assert isinstance(no_ledger, ReadResponse)
        assert no_ledger.status is BookieStatus.ENOLEDGER


async def test_fencing_over_the_wire() -> None:
    async with running_bookie() as bk, open_tcp_transport() as transport:
        for entry_id in range(3):
            response = await call(transport, bk.bookie_id, add_request(5, entry_id))
            assert isinstance(response, AddResponse)
            assert response.status is OK
        wrong = await call(transport, bk.bookie_id, read_request(5, -1, fence_key=OTHER_KEY))
        assert isinstance(wrong, ReadResponse)
        assert wrong.status is BookieStatus.EUA
        fenced = await call(transport, bk.bookie_id, read_request(5, -1, fence_key=KEY))
        assert isinstance(fenced, ReadResponse)
        assert (fenced.status, fenced.entry_id, fenced.body) == (OK, 2, packaged(5, 2))
        late = await call(transport, bk.bookie_id, add_request(5, 3))
        assert isinstance(late, AddResponse)
        assert late.status is BookieStatus.EFENCED
        recovery = await call(transport, bk.bookie_id, add_request(5, 3, recovery=True))
        assert isinstance(recovery, AddResponse)
        assert recovery.status is OK
        # Fencing a ledger this bookie never saw records it, so the old writer's first add meets the fence.
        empty = await call(transport, bk.bookie_id, read_request(6, -1, fence_key=KEY))
        assert isinstance(empty, ReadResponse)
        assert empty.status is BookieStatus.ENOENTRY
        first = await call(transport, bk.bookie_id, add_request(6, 0))
        assert isinstance(first, AddResponse)
        assert first.status is BookieStatus.EFENCED


async def test_wrong_master_key_is_eua() -> None:
    async with running_bookie() as bk, open_tcp_transport() as transport:
        assert (await call(transport, bk.bookie_id, add_request(7, 0))).status is OK
        response = await call(transport, bk.bookie_id, add_request(7, 1, key=OTHER_KEY))
        assert isinstance(response, AddResponse)
        assert response.status is BookieStatus.EUA


async def test_read_only_bookie_refuses_normal_adds_and_accepts_recovery_adds() -> None:
    async with running_bookie() as bk, open_tcp_transport() as transport:
        bk.bookie.state.set(True, "test")
        refused = await call(transport, bk.bookie_id, add_request(8, 0))
        assert isinstance(refused, AddResponse)
        assert refused.status is BookieStatus.EREADONLY
        accepted = await call(transport, bk.bookie_id, add_request(8, 0, recovery=True))
        assert isinstance(accepted, AddResponse)
        assert accepted.status is OK


async def test_lac_and_bookie_info_over_the_wire() -> None:
    async with running_bookie(memory_store_bytes_max=10_000) as bk, open_tcp_transport() as transport:
        await call(transport, bk.bookie_id, add_request(9, 0))
        lac_body = b"explicit-lac"
        written = await call(transport, bk.bookie_id, WriteLacRequest(next_request_id(), 9, 0, KEY, lac_body))
        assert written == WriteLacResponse(written.request_id, OK, 9)
        lac = await call(transport, bk.bookie_id, ReadLacRequest(next_request_id(), 9))
        assert isinstance(lac, ReadLacResponse)
        assert (lac.status, lac.lac_body, lac.last_entry_body) == (OK, lac_body, packaged(9, 0))
        info = await call(transport, bk.bookie_id, GetBookieInfoRequest(next_request_id()))
        assert isinstance(info, GetBookieInfoResponse)
        assert info.status is OK
        assert info.total_disk_bytes == bk.store.capacity_bytes
        assert 0 < info.free_disk_bytes < info.total_disk_bytes


async def test_server_inflight_limit_answers_etoomanyrequests() -> None:
    store = MemoryLedgerStore(auto_sync=False)
    async with running_bookie(store=store, inflight_requests_max=2) as bk, open_tcp_transport() as transport:
        pending = [send(transport, bk.bookie_id, add_request(10, e)) for e in range(3)]
        third = await pending[2].wait()
        assert isinstance(third, AddResponse)
        assert third.status is BookieStatus.ETOOMANYREQUESTS
        assert not pending[0].done.is_set()
        store.sync()
        for c in pending[:2]:
            response = await c.wait()
            assert isinstance(response, AddResponse)
            assert response.status is OK
        after = await call(transport, bk.bookie_id, read_request(10, 0))
        assert after.status is OK


async def test_client_inflight_limit_fails_clearly_and_never_inside_send() -> None:
    store = MemoryLedgerStore(auto_sync=False)
    settings = TcpTransportSettings(inflight_requests_max=1)
    async with running_bookie(store=store) as bk, open_tcp_transport(settings) as transport:
        first = send(transport, bk.bookie_id, add_request(11, 0))
        second = send(transport, bk.bookie_id, add_request(11, 1))
        assert second.calls == 0  # not delivered synchronously
        refused = await second.wait()
        assert isinstance(refused, ErrorResponse)
        assert refused.status is BookieStatus.ETOOMANYREQUESTS
        assert "inflight_requests_max=1" in refused.message
        await trio.testing.wait_all_tasks_blocked()
        store.sync()
        assert (await first.wait()).status is OK


async def test_drain_answers_accepted_requests_before_closing() -> None:
    store = MemoryLedgerStore(auto_sync=False)
    async with open_tcp_transport() as transport, running_bookie(store=store) as bk:
        pending = send(transport, bk.bookie_id, add_request(12, 0))
        while bk.bookie.server.connection_count == 0 or store.pending_count == 0:
            await trio.testing.wait_all_tasks_blocked()
        bk.bookie.request_stop()
        await trio.testing.wait_all_tasks_blocked()
        assert not bk.bookie.stopped.is_set()  # waiting for the add to become durable
        store.sync()
        response = await pending.wait()
        assert isinstance(response, AddResponse)
        assert response.status is OK
        with trio.fail_after(5):
            await bk.bookie.stopped.wait()


async def test_metrics_count_requests_by_op_and_status() -> None:
    async with running_bookie() as bk, open_tcp_transport() as transport:
        for entry_id in range(3):
            await call(transport, bk.bookie_id, add_request(13, entry_id))
        await call(transport, bk.bookie_id, read_request(13, 0))
        await call(transport, bk.bookie_id, read_request(13, 9))
        text = bk.bookie.render_metrics().decode()
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 3.0' in text
    assert 'bookkeeper_server_ADD_ENTRY_count{success="true"} 3.0' in text
    assert 'bookkeeper_server_READ_ENTRY_REQUEST_count{success="false"} 1.0' in text
    assert "# TYPE bookkeeper_server_ADD_ENTRY_REQUEST summary" in text
    assert "bookie_SERVER_STATUS 1.0" in text
    assert f"bookie_WRITE_BYTES {3 * len(packaged(13, 0))}.0" in text
    assert "magnetar_bookie_connections 1.0" in text


class _StoreWithStats(MemoryLedgerStore):
    def stats(self) -> dict[str, float]:
        return {
            "journal_queue_entries": 3,
            "journal fsyncs": 12,
            "journal_bytes": 4096,
            "write_throttled_adds": 5,
            "write_waiting_bytes": 100,
        }


async def test_store_figures_are_exported_when_the_store_offers_them() -> None:
    async with running_bookie(store=_StoreWithStats()) as bk:
        text = bk.bookie.render_metrics().decode()
    assert "magnetar_bookie_journal_queue_entries 3.0" in text
    assert "magnetar_bookie_journal_fsyncs 12.0" in text
    assert "bookie_journal_JOURNAL_WRITE_BYTES 4096.0" in text  # BookKeeper's name where it has one
    assert "bookie_throttled_write_requests 5.0" in text
    assert "magnetar_bookie_write_waiting_bytes 100.0" in text


async def test_serve_bookie_serves_a_bare_core() -> None:
    store = MemoryLedgerStore()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run)
        host, port = await nursery.start(serve_bookie, BookieCore(store), bookie_settings())
        assert host == "127.0.0.1"
        async with open_tcp_transport() as transport:
            response = await call(transport, f"{host}:{port}", add_request(14, 0))
            assert isinstance(response, AddResponse)
            assert response.status is OK
        store.close()
        nursery.cancel_scope.cancel()
