"""Bookie identity (BookKeeper's cookies): the cookie format, the startup check against real directories and a
memory metadata store, ``format``, and the cluster's instance id."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.bookkeeper.bookie.cookie import COOKIE_FILE_NAME, Cookie, CookieFormatError
from magnetar.bookkeeper.bookie.identity import (
    BookieDirectories,
    BookieIdentityError,
    bookie_directories,
    check_bookie_identity,
    format_bookie,
    verify_bookie_identity,
)
from magnetar.bookkeeper.bookie.storage.entry_index import EntryIndex, LedgerRecord
from magnetar.bookkeeper.bookie.storage.journal_files import journal_file_name
from magnetar.bookkeeper.bookie.storage.journal_format import HEADER_BYTES
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerState
from magnetar.bookkeeper.metadata.api import Stat
from magnetar.bookkeeper.metadata.bookies import (
    INSTANCE_ID_PATH,
    cookie_path,
    ensure_instance_id,
    read_cookie,
    writable_path,
)
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore

BOOKIE = "127.0.0.1:3181"


def dirs_of(tmp_path: Path, name: str = "bookie") -> BookieDirectories:
    """A bookie whose journal has a volume of its own (as in production)."""
    return BookieDirectories(
        journal=(str(tmp_path / name / "journal"),), ledger=(str(tmp_path / name / "data"),)
    )


def cookie_in(path: str) -> Cookie:
    return Cookie.from_bytes((Path(path) / COOKIE_FILE_NAME).read_bytes())


def listing(path: str) -> list[str]:
    return sorted(child.name for child in Path(path).iterdir())


def empty_out(path: str) -> None:
    for child in Path(path).iterdir():
        child.unlink()


def write(path: str, *names: str) -> None:
    """Create ``path`` (and parents) with a small file per name."""
    Path(path).mkdir(parents=True, exist_ok=True)
    for name in names:
        (Path(path) / name).write_bytes(b"x")


def move_ledger_volume(source: BookieDirectories, target: BookieDirectories) -> None:
    """Mount ``source``'s ledger volume (its cookie included) where ``target``'s was."""
    Path(target.ledger[0], COOKIE_FILE_NAME).unlink()
    Path(target.ledger[0]).rmdir()
    Path(source.ledger[0]).rename(target.ledger[0])


# -- the cookie ----------------------------------------------------------------------------------------------


def test_a_cookie_round_trips_and_names_what_differs() -> None:
    cookie = Cookie(BOOKIE, "instance-1", ("/j",), ("/d",))
    assert Cookie.from_bytes(cookie.to_bytes()) == cookie
    assert Cookie.from_bytes(Cookie(BOOKIE, None, (), ()).to_bytes()).instance_id is None
    other = Cookie("127.0.0.1:3182", "instance-2", ("/j",), ("/e",))
    assert cookie.differences(cookie) == []
    assert cookie.differences(other) == [
        "bookie id '127.0.0.1:3182' in the cookie, '127.0.0.1:3181' now",
        "ledger directories [/e] in the cookie, [/d] now",
        "cluster instance id 'instance-2' in the cookie, 'instance-1' now",
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"5\nbookieHost: x", "not a cookie"),
        (b'{"bookieId": "b"}', "not a cookie"),
        (
            b'{"formatVersion": 1, "bookieId": 7, "instanceId": null, "journalDirs": [], "ledgerDirs": []}',
            "string",
        ),
        (
            b'{"formatVersion": 9, "bookieId": "b", "instanceId": null, "journalDirs": [], "ledgerDirs": []}',
            "newer",
        ),
        (b" " * (65 * 1024), "larger than any cookie"),
    ],
)
def test_what_is_not_a_cookie_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(CookieFormatError, match=message):
        Cookie.from_bytes(data)


# -- the instance id -----------------------------------------------------------------------------------------


async def test_the_instance_id_is_created_once_and_a_racing_creator_wins() -> None:
    store = MemoryMetadataStore()
    first = await ensure_instance_id(store, lambda: "first")
    assert first == "first"
    assert await ensure_instance_id(store, lambda: "second") == "first"

    class Racing(MemoryMetadataStore):
        async def put(self, path: str, value: bytes, expected_version: int | None, **kw: bool) -> Stat:
            if path == INSTANCE_ID_PATH and not await self.exists(path):
                await super().put(path, b"theirs", -1)  # another process got there first
            return await super().put(path, value, expected_version, **kw)

    assert await ensure_instance_id(Racing(), lambda: "mine") == "theirs"


# -- the startup check ---------------------------------------------------------------------------------------


async def test_a_first_start_writes_the_cookie_everywhere_and_a_restart_reuses_it(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    cookie = await check_bookie_identity(store, BOOKIE, dirs)
    instance = await store.get(INSTANCE_ID_PATH)
    assert instance is not None
    assert cookie == Cookie(BOOKIE, instance.value.decode(), dirs.journal, dirs.ledger)
    stored = await read_cookie(store, BOOKIE)
    assert stored is not None
    assert Cookie.from_bytes(stored.value) == cookie
    assert cookie_in(dirs.journal[0]) == cookie_in(dirs.ledger[0]) == cookie

    (Path(dirs.ledger[0]) / "lastMark").write_bytes(b"data of the bookie")
    assert await check_bookie_identity(store, BOOKIE, dirs) == cookie
    again = await read_cookie(store, BOOKIE)
    assert again is not None
    assert again.stat.version == stored.stat.version  # nothing rewritten


async def test_a_wiped_ledger_directory_is_refused_with_what_to_do(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    empty_out(dirs.ledger[0])
    with pytest.raises(BookieIdentityError) as refused:
        await check_bookie_identity(store, BOOKIE, dirs)
    message = str(refused.value)
    assert f"a bookie with id {BOOKIE} existed" in message
    assert f"ledger directory {dirs.ledger[0]} has no cookie: its data is gone" in message
    assert "journal directory" not in message  # the journal kept its cookie
    assert f"magnetar admin bookies decommission {BOOKIE}" in message
    assert "magnetar bookie --format --force" in message
    assert not (Path(dirs.ledger[0]) / COOKIE_FILE_NAME).exists()  # nothing was written


async def test_a_bookie_whose_every_directory_is_new_is_refused_under_an_existing_id(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    shutil.rmtree(tmp_path / "bookie")  # the whole disk replaced
    with pytest.raises(BookieIdentityError, match=r"journal directory .*, ledger directory .* have no"):
        await check_bookie_identity(store, BOOKIE, dirs)
    with pytest.raises(
        BookieIdentityError, match=r"cookie of bookie .* does not match .* journal directories"
    ):
        await check_bookie_identity(store, BOOKIE, dirs_of(tmp_path, "elsewhere"))  # new volumes, new paths


def store_an_entry_log(dirs: BookieDirectories) -> None:
    """The ledger directory holds an entry log: the bookie stored ledger data."""
    write(str(Path(dirs.ledger[0]) / "ledgers"), "0.log")


def journal_a_record(dirs: BookieDirectories) -> None:
    """The first journal file, as a storage engine preallocates it, with one record after its header."""
    journal = Path(dirs.journal[0]) / journal_file_name(7)
    journal.write_bytes(bytes(HEADER_BYTES) + b"\x10\x00\x00\x08" + bytes(4096))


async def test_a_changed_address_is_refused(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    store_an_entry_log(dirs)
    with pytest.raises(BookieIdentityError) as refused:
        await check_bookie_identity(store, "127.0.0.1:3999", dirs)
    message = str(refused.value)
    assert "bookie id '127.0.0.1:3181' in the cookie, '127.0.0.1:3999' now" in message
    assert "address or port changed" in message
    assert f"magnetar admin bookies decommission {BOOKIE}`" in message  # the id the data belongs to
    assert "decommission 127.0.0.1:3999" not in message


async def test_a_fence_in_the_index_is_ledger_data_too(tmp_path: Path) -> None:
    """A fence (or ledger key) checkpointed into the index, its journal file since deleted."""
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    index = EntryIndex(Path(dirs.ledger[0]) / "index")
    batch = index.batch()
    batch.put_ledger(7, LedgerRecord(LedgerState(master_key=b"k", fenced=True)))
    index.write_sync(batch)
    index.close()
    with pytest.raises(BookieIdentityError, match="address or port changed"):
        await check_bookie_identity(store, "127.0.0.1:3999", dirs)


async def test_a_journal_record_is_ledger_data_too(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    journal_a_record(dirs)
    with pytest.raises(BookieIdentityError, match="address or port changed"):
        await check_bookie_identity(store, "127.0.0.1:3999", dirs)


async def test_a_changed_address_of_a_bookie_that_never_held_data_takes_the_new_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A first start whose port then failed (or a bookie stopped before any client wrote to it): its
    directories hold a cookie, a journal file without a record, an empty index, the mark, an empty
    entry-log directory - nothing to lose, so the new id takes them."""
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    (Path(dirs.journal[0]) / journal_file_name(2)).write_bytes(bytes(HEADER_BYTES + 4096))  # a restart's
    write(dirs.ledger[0], "lastMark")
    (Path(dirs.ledger[0]) / "ledgers").mkdir()
    EntryIndex(Path(dirs.ledger[0]) / "index").close()
    with caplog.at_level(logging.WARNING):
        await check_bookie_identity(store, "127.0.0.1:3999", dirs)
    assert "hold the cookie of bookie 127.0.0.1:3181 but never held ledger data" in caplog.text
    for _, path in dirs.all():
        assert cookie_in(path).bookie_id == "127.0.0.1:3999"
    assert await read_cookie(store, "127.0.0.1:3999") is not None
    assert await read_cookie(store, BOOKIE) is not None  # kept: the old id stays refused unless retired
    await check_bookie_identity(store, BOOKIE, dirs)  # and back: its stored cookie is the one expected
    assert cookie_in(dirs.ledger[0]).bookie_id == BOOKIE
    await check_bookie_identity(store, BOOKIE, dirs)  # a plain restart


async def test_directories_without_data_of_another_cluster_say_how_to_start_fresh(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(MemoryMetadataStore(), BOOKIE, dirs)
    with pytest.raises(BookieIdentityError, match="cluster instance id") as refused:
        await check_bookie_identity(MemoryMetadataStore(), "127.0.0.1:3999", dirs)
    message = str(refused.value)
    assert "hold no ledger data" in message
    assert f"to start fresh, delete {dirs.journal[0]}, {dirs.ledger[0]}" in message
    assert "decommission" not in message


async def test_swapped_volumes_are_refused(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    a, b = dirs_of(tmp_path, "a"), dirs_of(tmp_path, "b")
    await check_bookie_identity(store, "10.0.0.1:3181", a)
    await check_bookie_identity(store, "10.0.0.2:3181", b)
    move_ledger_volume(b, a)  # b's ledger volume mounted on a
    with pytest.raises(BookieIdentityError, match=r"bookie id '10\.0\.0\.2:3181' in the cookie") as refused:
        await check_bookie_identity(store, "10.0.0.1:3181", a)
    assert f"the cookie in ledger directory {a.ledger[0]} does not match" in str(refused.value)


async def test_a_volume_of_another_cluster_is_refused(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(MemoryMetadataStore(), BOOKIE, dirs)
    with pytest.raises(BookieIdentityError, match="cluster instance id") as refused:
        await check_bookie_identity(MemoryMetadataStore(), BOOKIE, dirs)  # a new metadata store
    assert "belongs to another cluster" in str(refused.value)


async def test_cookies_without_one_in_the_metadata_store_are_refused(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    await store.delete(cookie_path(BOOKIE))  # the identity was retired (decommissioned)
    with pytest.raises(BookieIdentityError, match="the metadata store has none for it"):
        await check_bookie_identity(store, BOOKIE, dirs)


async def test_a_directory_holding_something_else_is_refused(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path)
    write(dirs.ledger[0], "photos")
    with pytest.raises(BookieIdentityError, match="not empty and holds no bookie cookie"):
        await check_bookie_identity(MemoryMetadataStore(), BOOKIE, dirs)


async def test_lost_and_found_and_a_nested_journal_leave_a_directory_empty(tmp_path: Path) -> None:
    settings = BookieSettings(data_dir=tmp_path / "data")  # the journal defaults to data/journal
    dirs = bookie_directories(settings)
    assert dirs is not None
    assert dirs.journal == (str(tmp_path / "data" / "journal"),)
    (tmp_path / "data" / "lost+found").mkdir(parents=True)
    await check_bookie_identity(MemoryMetadataStore(), BOOKIE, dirs)
    assert cookie_in(dirs.journal[0]) == cookie_in(dirs.ledger[0])


async def test_data_of_a_bookie_from_before_cookies_is_adopted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dirs = dirs_of(tmp_path)
    write(dirs.ledger[0], "lastMark", "index", "ledgers")
    write(dirs.journal[0], "0000000000000003.txn")
    with caplog.at_level(logging.WARNING):
        cookie = await check_bookie_identity(MemoryMetadataStore(), BOOKIE, dirs)
    assert "written before cookies existed: adopting it" in caplog.text
    assert cookie_in(dirs.ledger[0]) == cookie


async def test_an_unreadable_cookie_file_is_refused_by_name(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    (Path(dirs.journal[0]) / COOKIE_FILE_NAME).write_bytes(b"garbage")
    with pytest.raises(BookieIdentityError, match=f"cookie file {dirs.journal[0]}/VERSION is unreadable"):
        await check_bookie_identity(store, BOOKIE, dirs)


async def test_a_bookie_racing_for_the_same_new_id_loses_and_takes_its_cookies_back(tmp_path: Path) -> None:
    class Racing(MemoryMetadataStore):
        async def put(self, path: str, value: bytes, expected_version: int | None, **kw: bool) -> Stat:
            if path == cookie_path(BOOKIE) and not await self.exists(path):
                await super().put(path, b"{}", -1)  # the other process's cookie lands first
            return await super().put(path, value, expected_version, **kw)

    dirs = dirs_of(tmp_path)
    with pytest.raises(BookieIdentityError, match="at the same moment"):
        await check_bookie_identity(Racing(), BOOKIE, dirs)
    assert not (Path(dirs.journal[0]) / COOKIE_FILE_NAME).exists()
    assert not (Path(dirs.ledger[0]) / COOKIE_FILE_NAME).exists()


async def test_the_memory_engine_is_not_checked(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    settings = BookieSettings(storage="memory", data_dir=tmp_path)
    assert await verify_bookie_identity(store, settings, BOOKIE) is None
    assert await read_cookie(store, BOOKIE) is None


# -- format ----------------------------------------------------------------------------------------------


async def test_format_needs_force_then_empties_the_directories_and_deletes_the_cookie(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    (Path(dirs.ledger[0]) / "ledgers").mkdir()
    (Path(dirs.ledger[0]) / "ledgers" / "0.log").write_bytes(b"entries")
    (Path(dirs.ledger[0]) / "lost+found").mkdir()
    with pytest.raises(BookieIdentityError, match="Add --force"):
        await format_bookie(store, BOOKIE, dirs, force=False)
    assert await read_cookie(store, BOOKIE) is not None

    result = await format_bookie(store, BOOKIE, dirs, force=True)
    assert result.cookie_deleted
    assert result.deleted == {dirs.journal[0]: 1, dirs.ledger[0]: 2}  # VERSION files and the entry logs
    assert listing(dirs.ledger[0]) == ["lost+found"]
    assert listing(dirs.journal[0]) == []
    assert await read_cookie(store, BOOKIE) is None
    second = await check_bookie_identity(store, BOOKIE, dirs)  # a new bookie under the same id
    assert cookie_in(dirs.ledger[0]) == second


async def test_format_of_empty_directories_needs_no_force(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    result = await format_bookie(store, BOOKIE, dirs_of(tmp_path), force=False)
    assert result.deleted == {str(tmp_path / "bookie" / "journal"): 0, str(tmp_path / "bookie" / "data"): 0}
    assert not result.cookie_deleted


async def test_format_refuses_a_registered_bookie(tmp_path: Path) -> None:
    store = MemoryMetadataStore()
    dirs = dirs_of(tmp_path)
    await check_bookie_identity(store, BOOKIE, dirs)
    await store.put(writable_path(BOOKIE), b"", -1, ephemeral=True)
    with pytest.raises(BookieIdentityError, match="is registered"):
        await format_bookie(store, BOOKIE, dirs, force=True)
    assert cookie_in(dirs.ledger[0]).bookie_id == BOOKIE
