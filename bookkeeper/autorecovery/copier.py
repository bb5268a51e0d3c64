"""Copying a closed fragment's entries to new bookies (BookKeeper's ``LedgerFragmentReplicator``).

For every entry of the fragment that one of the replaced indices stores, read it from a surviving replica of
its write set (the replicas one after another, as a normal read; the digest is verified, so a corrupt copy
is never propagated) and write the *same bytes* to the new bookie of each replaced index in that write set
with a RECOVERY_ADD (high priority, so a read-only bookie still accepts it and a fenced ledger too), keyed by
the ledger's master key. Up to ``rereplication_entry_batch_size`` entries are in flight; the
:class:`~.pacing.CopyPacer` holds the process to its rate limit. Nothing here changes metadata: the caller
swaps the bookies in the ensemble (compare-and-set) once every copy is acknowledged.

With ``only_missing`` (refilling a live bookie that lacks some entries, e.g. one an add never reached before
it was acknowledged by the others) each target is asked first and only the entries it answers "no such
entry" for are copied; metadata then stays as it is.

Copies stop at the next entry when ``should_stop()`` turns true (replication was disabled) with
:class:`ReplicationStopped`; an entry no survivor can serve, or a write the new bookie refuses, fails the
copy with :class:`FragmentCopyError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.autorecovery.fragments import Fragment
from magnetar.bookkeeper.autorecovery.metrics import AutoRecoveryStats
from magnetar.bookkeeper.autorecovery.pacing import CopyPacer
from magnetar.bookkeeper.client import (
    Answer,
    BKError,
    BookieId,
    ClientContext,
    LedgerMetadata,
    TimeoutQueue,
    next_request_id,
    write_set,
)
from magnetar.bookkeeper.protocol import (
    AddRequest,
    AddResponse,
    BookieStatus,
    Digester,
    DigestError,
    ReadRequest,
    ReadResponse,
    Request,
    master_key,
)


class FragmentCopyError(BKError):
    """An entry could not be read from any survivor or written to its new bookie."""


class ReplicationStopped(BKError):
    """Replication was disabled while copying."""


async def call(ctx: ClientContext, bookie: BookieId, request: Request, timeouts: TimeoutQueue) -> Answer:
    """One request, awaited (the client's timeouts apply)."""
    done = trio.Event()
    answers: list[Answer] = []

    def on_answer(answer: Answer) -> None:
        answers.append(answer)
        done.set()

    ctx.rpc.send(bookie, request, timeouts, on_answer)
    await done.wait()
    return answers[0]


@dataclass(frozen=True, slots=True)
class LedgerKeys:
    ledger_id: int
    digester: Digester
    master_key: bytes

    @classmethod
    def of(cls, ledger_id: int, metadata: LedgerMetadata, default: Digester) -> LedgerKeys:
        password = metadata.password or b""
        digest_type = metadata.digest_type or default.digest_type
        return cls(ledger_id, Digester(digest_type, password), master_key(password))


@dataclass(slots=True)
class CopyResult:
    entries: int = 0
    bytes: int = 0


class FragmentCopier:
    def __init__(
        self,
        ctx: ClientContext,
        pacer: CopyPacer,
        stats: AutoRecoveryStats,
        *,
        batch_size: int,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self._ctx = ctx
        self._pacer = pacer
        self._stats = stats
        self._batch_size = batch_size
        self._should_stop = should_stop

    async def copy(
        self,
        keys: LedgerKeys,
        metadata: LedgerMetadata,
        fragment: Fragment,
        targets: Mapping[int, BookieId],
        unusable: set[BookieId],
        *,
        only_missing: bool = False,
    ) -> CopyResult:
        """Copy to ``targets`` (index -> new bookie) every entry those indices store; survivors are the other
        members of the write sets, minus ``unusable`` (lost or suspect bookies)."""
        assert fragment.last_entry_id is not None, "only closed fragments are copied"
        result = CopyResult()
        failures: list[str] = []
        limiter = trio.CapacityLimiter(self._batch_size)
        async with trio.open_nursery() as nursery:
            for entry_id in self._entries(metadata, fragment, targets):
                if failures:
                    break
                if self._should_stop():
                    raise ReplicationStopped(f"ledger {keys.ledger_id}: replication was disabled")
                await limiter.acquire_on_behalf_of(entry_id)  # ids are unique within one copy
                nursery.start_soon(
                    self._copy_entry, keys, metadata, fragment, targets, unusable, entry_id, limiter, result,
                    failures, only_missing,
                )  # fmt: skip
        if failures:
            raise FragmentCopyError(f"ledger {keys.ledger_id}: {failures[0]}")
        return result

    def _entries(
        self, metadata: LedgerMetadata, fragment: Fragment, targets: Mapping[int, BookieId]
    ) -> Iterator[int]:
        """The fragment's entries that some replaced index stores, ascending (generated, not collected)."""
        assert fragment.last_entry_id is not None
        size, quorum = metadata.ensemble_size, metadata.write_quorum
        for entry_id in range(fragment.first_entry_id, fragment.last_entry_id + 1):
            if any((index - entry_id) % size < quorum for index in targets):
                yield entry_id

    async def _copy_entry(
        self,
        keys: LedgerKeys,
        metadata: LedgerMetadata,
        fragment: Fragment,
        targets: Mapping[int, BookieId],
        unusable: set[BookieId],
        entry_id: int,
        limiter: trio.CapacityLimiter,
        result: CopyResult,
        failures: list[str],
        only_missing: bool,
    ) -> None:
        try:
            indices = write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)
            wanted = {i: b for i, b in targets.items() if i in indices}
            if only_missing:
                wanted = {i: b for i, b in wanted.items() if await self._lacks(keys, entry_id, b, failures)}
                if not wanted:
                    return
            sources = [fragment.ensemble[i] for i in indices if i not in wanted]
            sources = [b for b in sources if b not in unusable]
            body = await self._read(keys, entry_id, sources)
            if body is None:
                failures.append(f"entry {entry_id} is readable on no survivor of {sources}")
                return
            await self._pacer.entry(len(body))
            for target in wanted.values():
                if not await self._write(keys, entry_id, target, body):
                    failures.append(f"entry {entry_id}: bookie {target} refused the copy")
                    return
            result.entries += 1
            result.bytes += len(body)
            self._stats.copied(self._ctx.clock.monotonic(), len(body))
        finally:
            limiter.release_on_behalf_of(entry_id)

    async def _lacks(self, keys: LedgerKeys, entry_id: int, bookie: BookieId, failures: list[str]) -> bool:
        """Does ``bookie`` answer "no such entry"? (Any other failure is recorded: no verdict, no copy.)"""
        answer = await call(
            self._ctx, bookie, ReadRequest(next_request_id(), keys.ledger_id, entry_id), self._ctx.rpc.reads
        )
        if isinstance(answer, ReadResponse) and answer.status in (
            BookieStatus.ENOENTRY,
            BookieStatus.ENOLEDGER,
        ):
            return True
        if not (isinstance(answer, ReadResponse) and answer.status is BookieStatus.EOK):
            failures.append(f"entry {entry_id}: no answer from {bookie} whether it holds it")
        return False

    async def _read(self, keys: LedgerKeys, entry_id: int, sources: list[BookieId]) -> bytes | None:
        for bookie in sources:
            request = ReadRequest(next_request_id(), keys.ledger_id, entry_id)
            answer = await call(self._ctx, bookie, request, self._ctx.rpc.reads)
            if isinstance(answer, ReadResponse) and answer.status is BookieStatus.EOK:
                try:
                    keys.digester.unpack(answer.body, keys.ledger_id, entry_id)
                except DigestError:
                    continue
                return answer.body
        return None

    async def _write(self, keys: LedgerKeys, entry_id: int, target: BookieId, body: bytes) -> bool:
        request = AddRequest(
            next_request_id(),
            keys.ledger_id,
            entry_id,
            keys.master_key,
            body,
            recovery=True,
            high_priority=True,
        )
        answer = await call(self._ctx, target, request, self._ctx.rpc.adds)
        return isinstance(answer, AddResponse) and answer.status is BookieStatus.EOK
