"""The bookie's identity check at startup and ``bookie format`` (BookKeeper's ``LegacyCookieValidation``,
``BookieImpl.format`` and ``FormatCommand``).

Theory of operation. Before the storage engine touches its directories, the bookie builds the cookie its
configuration implies (:class:`~.cookie.Cookie`: bookie id, journal and ledger directories, the cluster's
instance id from ``/ledgers/INSTANCEID``, created if it is missing), reads the cookie the metadata store holds
for its bookie id and the ``VERSION`` file of each directory, and decides (:func:`decide`):

* **Known bookie**: the stored cookie and every directory's cookie match the configuration. It starts.
* **New bookie**: the metadata store has no cookie for this id and every directory is empty (missing, or
  holding only ``lost+found`` and the bookie's other directories nested in it). The cookie is written into
  every directory, then created in the metadata store (create-only: a bookie racing for the same id loses,
  and its directory cookies are taken back). An id that was decommissioned (its cookie deleted when its
  data had been moved off) leaves the decommissioning list here, so that new ensembles pick it again.
* **Data written before cookies existed**: no cookie anywhere, and the non-empty directories hold only what
  a Magnetar bookie writes. The cookie is written as for a new bookie, with a warning. (BookKeeper refuses
  this case and leaves it to an upgrade command; here a bookie upgraded in place keeps serving.)
* **A changed id on directories that hold no ledger data**: every directory's cookie differs from the
  configuration in the bookie id alone (a changed address or port - a first start that failed on a taken
  port left such cookies in older versions), none holds an entry, a fence or a ledger key, and the metadata
  store has no cookie for the new id (or one equal to the configuration's). Nothing can be lost, so the
  directories take the new id with a warning (see :func:`_renamed_unused` for BookKeeper's precedent); the
  old id's cookie stays in the metadata store, refused as any retired identity until it is decommissioned.
* Everything else is refused with :class:`BookieIdentityError`, whose message names what disagrees and what
  to do (the id it names to retire is the one in the cookie, whose data it is; directories that hold no
  ledger data say so, and how to start fresh):

  - the stored cookie exists but a directory has none: the bookie's data is gone (a wiped disk, a new
    volume). Under its old id it would answer "no such entry" for entries it acknowledged, and ledger
    recovery could take that for "never written" and close a ledger short of what writers were told was
    stored. Its ledgers must be re-replicated and its identity retired before it starts again, as a new
    bookie, after ``magnetar bookie --format``;
  - a cookie differs from the configuration (bookie id: a changed address or port; directories: a volume
    mounted elsewhere or swapped with another bookie's; instance id: a volume of another cluster);
  - directories hold cookies but the metadata store has none for this id (a decommissioned or formatted
    identity, or another cluster's metadata store);
  - a directory without a cookie holds files a bookie does not write.

BookKeeper also accepts a new empty ledger directory added to a set of ledger directories
(``allowStorageExpansion``); a Magnetar bookie has exactly one journal and one ledger directory, so any
directory of a known bookie that lacks its cookie is refused.

The memory engine has no directories and nothing that survives a restart: it is not checked.

Formatting (:func:`format_bookie`) empties the directories (keeping ``lost+found``) - only with ``force``
when they hold anything - and deletes the bookie's cookie from the metadata store, refusing while a bookie
with that id is registered. Directory I/O goes through the :class:`Volumes` seam (the simulation models its
bookies' disks with it); :class:`DiskVolumes` runs it in worker threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, TypeVar

import trio

from magnetar.bookkeeper.bookie.cookie import (
    COOKIE_BYTES_MAX,
    COOKIE_FILE_NAME,
    Cookie,
    CookieFormatError,
)
from magnetar.bookkeeper.bookie.settings import BookieServerSettings
from magnetar.bookkeeper.bookie.storage import (
    JOURNAL_HEADER_BYTES,
    RECORD_HEADER_BYTES,
    check_not_in_use,
    fsync_dir,
    index_is_empty,
)
from magnetar.bookkeeper.metadata import (
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    cookie_path,
    decommissioning_path,
    ensure_instance_id,
    join,
    read_cookie,
    readonly_path,
    writable_path,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
Role = Literal["journal", "ledger"]

KEPT_NAMES = frozenset({"lost+found"})
"""Entries a fresh file system has; they neither make a directory non-empty nor are removed by a format."""

LEDGER_DIR_FILES = frozenset({"lastMark", "lastMark.tmp", "index", "ledgers"})
"""What the disk engine keeps in its ledger directory (journal mark and its temporary, RocksDB index, entry
logs)."""
JOURNAL_FILE_SUFFIX = ".txn"
ENTRY_LOG_DIR_NAME = "ledgers"
INDEX_DIR_NAME = "index"
COOKIE_TEMPORARY_NAME = COOKIE_FILE_NAME + ".tmp"

DECOMMISSION_HINT = (
    "To start this bookie as a new one instead, first retire the old identity - re-replicate the ledgers "
    "that name it (`magnetar admin bookies decommission {bookie_id}`, or recover them) - then run "
    "`magnetar bookie --format --force` with the same settings (BookKeeper's `bookieformat`) and start it."
)


class BookieIdentityError(Exception):
    """The bookie refuses to start (or to be formatted); the message says what disagrees and what to do."""


@dataclass(frozen=True, slots=True)
class BookieDirectories:
    journal: tuple[str, ...]
    ledger: tuple[str, ...]

    def all(self) -> list[tuple[Role, str]]:
        """Every directory once, with its role (journal first)."""
        pairs: list[tuple[Role, str]] = [("journal", path) for path in self.journal]
        pairs += [("ledger", path) for path in self.ledger]
        seen: set[str] = set()
        out: list[tuple[Role, str]] = []
        for role, path in pairs:
            if path not in seen:
                seen.add(path)
                out.append((role, path))
        return out

    def nested_names(self, path: str) -> frozenset[str]:
        """Names of the entries of ``path`` that are (or lead to) another of the bookie's directories."""
        names = set()
        for _, other in self.all():
            if other != path and other.startswith(path.rstrip(os.sep) + os.sep):
                names.add(Path(other).relative_to(path).parts[0])
        return frozenset(names)


def bookie_directories(settings: BookieServerSettings) -> BookieDirectories | None:
    """The directories whose cookies identify the bookie, as absolute paths; None for the memory engine."""
    if settings.storage != "disk":
        return None
    storage = settings.storage_settings()
    return BookieDirectories(
        journal=(os.path.abspath(storage.journal_path),), ledger=(os.path.abspath(storage.data_dir),)
    )


@dataclass(frozen=True, slots=True)
class DirectoryState:
    path: str
    role: Role
    cookie: Cookie | None
    empty: bool
    """Nothing in it but :data:`KEPT_NAMES` and the bookie's nested directories (or it does not exist)."""
    bookie_data: bool
    """Everything in it is what the disk engine writes there (data of a bookie from before cookies)."""
    never_written: bool = False
    """It holds no ledger data: nothing but its cookie and what a storage engine creates when it opens -
    journal files without a record, an empty entry-log directory, an index without an entry location or a
    ledger record, the journal mark. Every entry, fence and ledger key is journaled first and reaches the
    entry logs or the index at a checkpoint before its journal file is deleted, so none was ever stored."""


class Volumes(Protocol):
    """The directories' I/O: the real file system (:class:`DiskVolumes`) or a simulation's disks."""

    async def inspect(self, path: str, role: Role, nested: frozenset[str]) -> DirectoryState:
        """Raises :class:`BookieIdentityError` when the directory or its cookie cannot be read."""
        ...

    async def stamp(self, path: str, cookie: Cookie) -> None:
        """Write the cookie into the directory durably (creating the directory)."""
        ...

    async def unstamp(self, path: str) -> None: ...

    async def contents(self, path: str, nested: frozenset[str]) -> list[str]:
        """Names a format deletes: everything but :data:`KEPT_NAMES` and the nested bookie directories."""
        ...

    async def wipe(self, path: str, nested: frozenset[str]) -> None:
        """Delete what :meth:`contents` lists; the directory stays."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    stamp: tuple[str, ...] = ()
    """Directories to write the cookie into; non-empty only for a new (or adopted) bookie, whose cookie is
    then created in the metadata store as well."""
    adopted: bool = False
    renamed_from: str | None = None
    """The bookie id in the directories' cookies when they are re-stamped for a new id: they never held
    ledger data (see :func:`decide`)."""


def decide(expected: Cookie, stored: Cookie | None, dirs: Sequence[DirectoryState]) -> Verdict:
    """Known, new or refused (see the module's docstring). Pure: no I/O."""
    bookie_id = expected.bookie_id
    hint = DECOMMISSION_HINT.format(bookie_id=bookie_id)
    if (old_id := _renamed_unused(expected, stored, dirs)) is not None:
        return Verdict(stamp=tuple(s.path for s in dirs), renamed_from=old_id)
    if stored is not None and (diffs := expected.differences(stored)):
        raise BookieIdentityError(
            f"the metadata store's cookie of bookie {bookie_id} ({cookie_path(bookie_id)}) does not match "
            f"this bookie: {'; '.join(diffs)}. Start it with the settings it was created with, or put its "
            f"volumes back where they were. {hint}"
        )
    for state in dirs:
        if state.cookie is not None and (diffs := expected.differences(state.cookie)):
            if all(s.never_written for s in dirs):
                raise BookieIdentityError(
                    f"the cookie in {state.role} directory {state.path} does not match this bookie: "
                    f"{'; '.join(diffs)} - {_cause(diffs)}. The directories hold no ledger data (nothing was "
                    f"ever stored there): to start fresh, delete {_listing(dirs)} (or run `magnetar bookie "
                    f"--format --force` with the same settings), or start the bookie with the settings it "
                    f"was created with."
                )
            old_hint = DECOMMISSION_HINT.format(bookie_id=state.cookie.bookie_id)
            raise BookieIdentityError(
                f"the cookie in {state.role} directory {state.path} does not match this bookie: "
                f"{'; '.join(diffs)} - {_cause(diffs)}. Start the bookie with the settings it was created "
                f"with, or mount the right volume there. {old_hint}"
            )
    missing = [state for state in dirs if state.cookie is None]
    if stored is not None:
        if missing:
            names = ", ".join(f"{s.role} directory {s.path}" for s in missing)
            raise BookieIdentityError(
                f"a bookie with id {bookie_id} existed (its cookie is in the metadata store at "
                f"{cookie_path(bookie_id)}), but its {names} {'has' if len(missing) == 1 else 'have'} no "
                f"cookie: its data is gone (a wiped disk or a new volume). Under the old id it would answer "
                f"'no such entry' for entries it acknowledged, and ledger recovery could cut ledgers short. "
                f"Put the original volume back if it still exists. {hint}"
            )
        return Verdict()
    if len(missing) < len(dirs):
        with_cookie = ", ".join(s.path for s in dirs if s.cookie is not None)
        raise BookieIdentityError(
            f"{with_cookie} hold{'s' if len(dirs) - len(missing) == 1 else ''} the cookie of bookie "
            f"{bookie_id}, but the metadata store has none for it ({cookie_path(bookie_id)}): the bookie was "
            f"decommissioned or formatted, or this is not the metadata store of the cluster the data belongs "
            f"to. Check --metadata-url; if the identity was retired, run `magnetar bookie --format --force` "
            f"with the same settings to start as a new bookie."
        )
    foreign = [s for s in dirs if not s.empty and not s.bookie_data]
    if foreign:
        raise BookieIdentityError(
            f"{', '.join(s.path for s in foreign)} {'is' if len(foreign) == 1 else 'are'} not empty and "
            f"hold{'s' if len(foreign) == 1 else ''} no bookie cookie: refusing to start bookie {bookie_id} "
            f"on a directory that may belong to something else. Empty it, or point the bookie elsewhere."
        )
    everything = tuple(s.path for s in dirs)
    return Verdict(stamp=everything, adopted=any(not s.empty for s in dirs))


def _renamed_unused(expected: Cookie, stored: Cookie | None, dirs: Sequence[DirectoryState]) -> str | None:
    """The old bookie id when the directories may simply take ``expected``'s id, else None.

    That is when every directory holds a cookie that differs from ``expected`` in the bookie id alone (the
    same old id in each: the bookie's address or port changed), every directory never held ledger data, and
    the metadata store has no cookie for the new id, or one equal to ``expected`` (a return to an id these
    directories had before). Nothing stored can then be lost or answered for under the wrong id: no entry,
    fence or ledger key is stored here. BookKeeper's ``allowStorageExpansion`` follows the same rule - a
    change to a bookie's identity that cannot lose data (adding empty directories) is accepted at start-up,
    anything else needs an operator - and its ``bookieformat`` is what an operator would otherwise run."""
    if not dirs or (stored is not None and expected.differences(stored)):
        return None
    old_ids = set()
    for state in dirs:
        if state.cookie is None or not state.never_written:
            return None
        diffs = expected.differences(state.cookie)
        if len(diffs) != 1 or not diffs[0].startswith("bookie id"):
            return None
        old_ids.add(state.cookie.bookie_id)
    return old_ids.pop() if len(old_ids) == 1 else None


def _listing(dirs: Sequence[DirectoryState]) -> str:
    return ", ".join(s.path for s in dirs)


def _cause(diffs: list[str]) -> str:
    if any(d.startswith("bookie id") for d in diffs):
        return "the bookie's address or port changed, or this is another bookie's volume"
    if any(d.startswith("cluster instance id") for d in diffs):
        return "this volume belongs to another cluster (or the metadata store was re-created)"
    return "the volume was mounted at another path or swapped with another bookie's"


async def check_bookie_identity(
    metadata: MetadataStore,
    bookie_id: str,
    dirs: BookieDirectories,
    *,
    volumes: Volumes | None = None,
    new_instance_id: Callable[[], str] | None = None,
) -> Cookie:
    """Check (and on a first start write) the bookie's cookies; raise :class:`BookieIdentityError` to
    refuse. Run it before the storage engine opens the directories."""
    volumes = volumes or DiskVolumes()
    if new_instance_id is None:
        instance_id = await ensure_instance_id(metadata)
    else:
        instance_id = await ensure_instance_id(metadata, new_instance_id)
    expected = Cookie(bookie_id, instance_id, dirs.journal, dirs.ledger)
    stored_node = await read_cookie(metadata, bookie_id)
    stored = None
    if stored_node is not None:
        try:
            stored = Cookie.from_bytes(stored_node.value)
        except CookieFormatError as exc:
            raise BookieIdentityError(f"the cookie at {cookie_path(bookie_id)} is unreadable: {exc}") from exc
    states = [await volumes.inspect(path, role, dirs.nested_names(path)) for role, path in dirs.all()]
    verdict = decide(expected, stored, states)
    if not verdict.stamp:
        log.info("bookie %s: cookies match (instance %s)", bookie_id, instance_id)
        return expected
    if verdict.renamed_from is not None:
        log.warning(
            "bookie %s: %s hold the cookie of bookie %s but never held ledger data: taking them as bookie %s "
            "(the metadata store keeps the cookie of %s; decommission that id if it is not coming back)",
            bookie_id,
            _listing(states),
            verdict.renamed_from,
            bookie_id,
            verdict.renamed_from,
        )
        if stored is not None:  # a return to this id: its cookie is in the metadata store already
            for path in verdict.stamp:
                await volumes.stamp(path, expected)
            return expected
    if verdict.adopted:
        log.warning(
            "bookie %s: no cookie anywhere, and %s hold bookie data written before cookies existed: "
            "adopting it as this bookie's",
            bookie_id,
            ", ".join(s.path for s in states if not s.empty),
        )
    # A decommissioned identity may be reused (its cookie was deleted): the new bookie is no longer leaving.
    with contextlib.suppress(NotFoundError):
        await metadata.delete(join(decommissioning_path(), bookie_id))
    for path in verdict.stamp:
        await volumes.stamp(path, expected)
    try:
        await metadata.put(cookie_path(bookie_id), expected.to_bytes(), -1)
    except BaseException as exc:
        with trio.CancelScope(shield=True):
            for path in verdict.stamp:
                await volumes.unstamp(path)
        if isinstance(exc, BadVersionError):
            raise BookieIdentityError(
                f"another bookie created the cookie of {bookie_id} at the same moment: is this id in use?"
            ) from exc
        raise
    log.info("bookie %s: new bookie, cookie written to %s and the metadata store", bookie_id, verdict.stamp)
    return expected


@dataclass(frozen=True, slots=True)
class FormatResult:
    deleted: dict[str, int]
    """Entries deleted per directory."""
    cookie_deleted: bool


async def format_bookie(
    metadata: MetadataStore | None,
    bookie_id: str | None,
    dirs: BookieDirectories | None,
    *,
    force: bool,
    volumes: Volumes | None = None,
) -> FormatResult:
    """Empty the bookie's directories and delete its cookie from the metadata store (see the module's
    docstring). ``bookie_id`` None (a ``--port 0`` bookie has no fixed id) leaves the metadata store alone."""
    volumes = volumes or DiskVolumes()
    if metadata is not None and bookie_id is not None:
        registered = [await metadata.exists(p) for p in (writable_path(bookie_id), readonly_path(bookie_id))]
        if any(registered):
            raise BookieIdentityError(
                f"bookie {bookie_id} is registered (running, or stopped less than its metadata session "
                f"timeout ago): stop it before formatting it"
            )
    paths = [] if dirs is None else [path for _, path in dirs.all()]
    nested = {path: dirs.nested_names(path) for path in paths} if dirs is not None else {}
    contents = {path: await volumes.contents(path, nested[path]) for path in paths}
    occupied = {path: names for path, names in contents.items() if names}
    if occupied and not force:
        listing = "; ".join(
            f"{path} ({len(names)} entries: {', '.join(names[:5])})" for path, names in occupied.items()
        )
        raise BookieIdentityError(f"formatting deletes everything in {listing}. Add --force to do it.")
    for path in paths:
        await volumes.wipe(path, nested[path])
        log.warning("formatted %s (%d entries deleted)", path, len(contents[path]))
    cookie_deleted = False
    if metadata is not None and bookie_id is not None:
        node = await read_cookie(metadata, bookie_id)
        if node is not None:
            try:
                await metadata.delete(cookie_path(bookie_id), node.stat.version)
            except MetadataStoreError as exc:
                raise BookieIdentityError(f"deleting {cookie_path(bookie_id)} failed: {exc}") from exc
            cookie_deleted = True
            log.warning("deleted the cookie of bookie %s from the metadata store", bookie_id)
    return FormatResult({path: len(names) for path, names in contents.items()}, cookie_deleted)


class DiskVolumes:
    """:class:`Volumes` on the real file system; blocking calls run in worker threads."""

    async def inspect(self, path: str, role: Role, nested: frozenset[str]) -> DirectoryState:
        return await _in_thread(f"reading {path}", _inspect, path, role, nested)

    async def stamp(self, path: str, cookie: Cookie) -> None:
        await _in_thread(f"writing the cookie into {path}", _stamp, path, cookie)

    async def unstamp(self, path: str) -> None:
        try:
            await trio.to_thread.run_sync(_unstamp, path)
        except OSError as exc:
            log.error("could not take back the cookie in %s: %s", path, exc)

    async def contents(self, path: str, nested: frozenset[str]) -> list[str]:
        return await _in_thread(f"listing {path}", _names, path, nested)

    async def wipe(self, path: str, nested: frozenset[str]) -> None:
        await _in_thread(f"formatting {path}", _wipe, path, nested)


async def _in_thread(what: str, fn: Callable[..., T], *args: object) -> T:
    try:
        return await trio.to_thread.run_sync(fn, *args)
    except OSError as exc:
        raise BookieIdentityError(f"{what} failed: {exc}") from exc


def _names(path: str, ignored: frozenset[str]) -> list[str]:
    try:
        entries = os.listdir(path)
    except FileNotFoundError:
        return []
    return sorted(name for name in entries if name not in KEPT_NAMES and name not in ignored)


def _inspect(path: str, role: Role, nested: frozenset[str]) -> DirectoryState:
    names = _names(path, nested | {COOKIE_TEMPORARY_NAME})  # a temporary left by a crash while stamping
    cookie = None
    if COOKIE_FILE_NAME in names:
        file = Path(path) / COOKIE_FILE_NAME
        with open(file, "rb") as f:
            data = f.read(COOKIE_BYTES_MAX + 1)
        try:
            cookie = Cookie.from_bytes(data)
        except CookieFormatError as exc:
            raise BookieIdentityError(f"the cookie file {file} is unreadable: {exc}") from exc
    if role == "ledger":
        bookie_data = all(name in LEDGER_DIR_FILES for name in names)
    else:
        bookie_data = all(name.endswith(JOURNAL_FILE_SUFFIX) for name in names)
    return DirectoryState(
        path,
        role,
        cookie,
        empty=not names,
        bookie_data=bool(names) and bookie_data,
        never_written=_never_written(Path(path), role, names),
    )


def _never_written(directory: Path, role: Role, names: list[str]) -> bool:
    """No entry, fence or ledger key is stored here (see :attr:`DirectoryState.never_written`)."""
    if role == "ledger":
        if not set(names) <= LEDGER_DIR_FILES | {COOKIE_FILE_NAME}:
            return False
        entry_logs = directory / ENTRY_LOG_DIR_NAME
        if entry_logs.is_dir() and any(entry_logs.iterdir()):
            return False
        return index_is_empty(directory / INDEX_DIR_NAME)
    journals = [name for name in names if name != COOKIE_FILE_NAME]
    return all(name.endswith(JOURNAL_FILE_SUFFIX) and _no_record(directory / name) for name in journals)


def _no_record(journal: Path) -> bool:
    """The journal file holds no record: the word after its header is zero (files are preallocated with
    zeros, and a zero word ends the records)."""
    with open(journal, "rb") as f:
        f.seek(JOURNAL_HEADER_BYTES)
        first_word = f.read(RECORD_HEADER_BYTES)
    return not first_word.strip(b"\0")


def _stamp(path: str, cookie: Cookie) -> None:
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / COOKIE_TEMPORARY_NAME
    with open(temporary, "wb") as f:
        f.write(cookie.to_bytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, directory / COOKIE_FILE_NAME)
    fsync_dir(directory)


def _unstamp(path: str) -> None:
    (Path(path) / COOKIE_FILE_NAME).unlink(missing_ok=True)


def _wipe(path: str, nested: frozenset[str]) -> None:
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    for name in _names(path, nested):
        child = directory / name
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    fsync_dir(directory)


async def verify_bookie_identity(
    metadata: MetadataStore, settings: BookieServerSettings, bookie_id: str
) -> Cookie | None:
    """:func:`check_bookie_identity` for a bookie configured by ``settings`` (None: the memory engine, which
    keeps nothing across restarts, is not checked)."""
    dirs = bookie_directories(settings)
    if dirs is None:
        log.info("bookie %s: %s engine, no cookie check", bookie_id, settings.storage)
        return None
    # Another bookie running on these directories is what is wrong then, not its cookie.
    await trio.to_thread.run_sync(check_not_in_use, settings.storage_settings())
    return await check_bookie_identity(metadata, bookie_id, dirs)


def find_identity_error(exc: BaseException) -> BookieIdentityError | None:
    """The :class:`BookieIdentityError` in ``exc`` (an exception group included), if any."""
    if isinstance(exc, BookieIdentityError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find_identity_error(inner)
            if found is not None:
                return found
    return None
