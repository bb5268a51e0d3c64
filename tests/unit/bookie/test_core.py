"""BookieCore request logic against the in-memory store: keys, fencing, read-only, durability order."""

from __future__ import annotations

from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.storage.memory_store import MemoryLedgerStore
from magnetar.bookkeeper.protocol.digest import Digester, DigestType, master_key
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    AddResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Response,
    WriteLacRequest,
)
from magnetar.bookkeeper.protocol.status import BookieStatus

KEY = master_key(b"pw")
OTHER_KEY = master_key(b"other")
DIGEST = Digester(DigestType.CRC32C)


def entry(ledger: int, entry_id: int, payload: bytes = b"x") -> bytes:
    return DIGEST.package(ledger, entry_id, entry_id - 1, entry_id + 1, payload)


class Bookie:
    def __init__(self, readonly: bool = False) -> None:
        self.store = MemoryLedgerStore(auto_sync=False)
        self.readonly = readonly
        self.core = BookieCore(self.store, is_readonly=lambda: self.readonly)
        self.responses: list[Response] = []

    def add(self, ledger: int, entry_id: int, *, key: bytes = KEY, recovery: bool = False) -> None:
        request = AddRequest(1, ledger, entry_id, key, entry(ledger, entry_id), recovery=recovery)
        self.core.handle(request, self.responses.append)

    def read(self, ledger: int, entry_id: int, *, fence: bool = False, key: bytes | None = None) -> None:
        self.core.handle(ReadRequest(2, ledger, entry_id, fence, key), self.responses.append)

    def last(self) -> Response:
        assert self.responses, "no response yet"
        return self.responses[-1]


def test_add_is_acknowledged_only_when_durable() -> None:
    bookie = Bookie()
    bookie.add(7, 0)
    assert bookie.responses == []
    bookie.store.sync()
    assert bookie.last() == AddResponse(1, BookieStatus.EOK, 7, 0)


def test_wrong_master_key_is_unauthorized() -> None:
    bookie = Bookie()
    bookie.add(7, 0)
    bookie.store.sync()
    bookie.add(7, 1, key=OTHER_KEY)
    assert bookie.last() == AddResponse(1, BookieStatus.EUA, 7, 1)


def test_body_for_another_entry_is_a_bad_request() -> None:
    bookie = Bookie()
    bookie.core.handle(AddRequest(1, 7, 1, KEY, entry(7, 2)), bookie.responses.append)
    assert bookie.last() == AddResponse(1, BookieStatus.EBADREQ, 7, 1)


def test_fence_waits_for_durability_and_blocks_normal_adds() -> None:
    bookie = Bookie()
    bookie.add(7, 0)
    bookie.store.sync()
    bookie.read(7, -1, fence=True, key=KEY)
    assert len(bookie.responses) == 1, "the fence answer must wait for the fence to be durable"
    bookie.store.sync()
    fenced = bookie.last()
    assert isinstance(fenced, ReadResponse)
    assert (fenced.status, fenced.entry_id) == (BookieStatus.EOK, 0)
    bookie.add(7, 1)
    assert bookie.last() == AddResponse(1, BookieStatus.EFENCED, 7, 1)
    bookie.add(7, 1, recovery=True)
    bookie.store.sync()
    assert bookie.last() == AddResponse(1, BookieStatus.EOK, 7, 1)


def test_fencing_an_unknown_ledger_records_it_so_late_adds_are_fenced() -> None:
    bookie = Bookie()
    bookie.read(9, -1, fence=True, key=KEY)
    bookie.store.sync()
    answer = bookie.last()
    assert isinstance(answer, ReadResponse)
    assert answer.status is BookieStatus.ENOENTRY
    bookie.add(9, 0)
    assert bookie.last() == AddResponse(1, BookieStatus.EFENCED, 9, 0)


def test_fence_with_wrong_key_is_refused_and_does_not_fence() -> None:
    bookie = Bookie()
    bookie.add(7, 0)
    bookie.store.sync()
    bookie.read(7, -1, fence=True, key=OTHER_KEY)
    answer = bookie.last()
    assert isinstance(answer, ReadResponse)
    assert answer.status is BookieStatus.EUA
    state = bookie.store.ledger_state(7)
    assert state is not None
    assert not state.fenced


def test_fence_survives_a_crash_only_once_durable() -> None:
    bookie = Bookie()
    bookie.add(7, 0)
    bookie.store.sync()
    bookie.read(7, -1, fence=True, key=KEY)
    bookie.store.crash()
    state = bookie.store.ledger_state(7)
    assert state is not None
    assert not state.fenced, "an unsynced fence is lost by a crash (and was never acknowledged)"
    bookie.read(7, -1, fence=True, key=KEY)
    bookie.store.sync()
    bookie.store.crash()
    state = bookie.store.ledger_state(7)
    assert state is not None
    assert state.fenced


def test_read_statuses() -> None:
    bookie = Bookie()
    bookie.read(5, 0)
    assert isinstance(bookie.last(), ReadResponse)
    assert bookie.last().status is BookieStatus.ENOLEDGER
    bookie.add(5, 0)
    bookie.read(5, 1)
    assert bookie.last().status is BookieStatus.ENOENTRY
    bookie.read(5, 0)
    read = bookie.last()
    assert isinstance(read, ReadResponse)
    assert read.status is BookieStatus.EOK
    assert DIGEST.unpack(read.body, 5, 0).payload == b"x"


def test_read_only_bookie_refuses_normal_adds_but_takes_recovery_adds() -> None:
    bookie = Bookie(readonly=True)
    bookie.add(3, 0)
    assert bookie.last() == AddResponse(1, BookieStatus.EREADONLY, 3, 0)
    bookie.add(3, 0, recovery=True)
    bookie.store.sync()
    assert bookie.last() == AddResponse(1, BookieStatus.EOK, 3, 0)


def test_explicit_lac_round_trip() -> None:
    bookie = Bookie()
    bookie.add(4, 0)
    body = DIGEST.package_lac(4, 0)
    bookie.core.handle(WriteLacRequest(3, 4, 0, KEY, body), bookie.responses.append)
    bookie.store.sync()
    bookie.core.handle(ReadLacRequest(4, 4), bookie.responses.append)
    answer = bookie.last()
    assert isinstance(answer, ReadLacResponse)
    assert answer.status is BookieStatus.EOK
    assert DIGEST.unpack_lac(answer.lac_body, 4) == 0
    assert DIGEST.unpack(answer.last_entry_body, 4, 0).entry_id == 0
