"""Ledger metadata: BookKeeper's ``LedgerMetadataFormat``, validated on construction, with its serialization.

Fields and rules (docs/upstream.md, BookKeeper §1.1, ``LedgerMetadataBuilder.build``): ``E >= WQ >= AQ >= 1``;
at least one ensemble, each of exactly E distinct bookies, keyed by the id of its first entry, keys strictly
increasing from 0; ``last_entry_id`` and ``length`` are meaningful only when CLOSED (``-1``/``0`` otherwise);
digest type and password are both present or both absent. States move OPEN -> IN_RECOVERY -> CLOSED or OPEN ->
CLOSED (§1.2); the helpers that derive a new value (:meth:`LedgerMetadata.with_ensemble`, :meth:`closed`, ...)
are what the metadata update loop's transforms use.

Serialized form (stored at the ledger's path). A header line, then one JSON object::

    MagnetarLedgerMetadataFormatVersion\\t1\\n
    {"state": "OPEN|IN_RECOVERY|CLOSED", "ensembleSize": E, "quorumSize": WQ, "ackQuorumSize": AQ,
     "lastEntryId": -1, "length": 0,
     "segment": [{"firstEntryId": 0, "ensembleMember": ["host:port", ...]}, ...],
     "digestType": "CRC32C" | null, "password": "<base64>" | null, "ctime": <ms>, "cToken": <int>,
     "customMetadata": {"key": "<base64>"}}

The keys are the field names of BookKeeper's protobuf (``quorumSize`` is the write quorum). The header plays
the role of BookKeeper's ``BookieMetadataFormatVersion`` line; a reader refuses a version it does not know.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from magnetar.bookkeeper.client.settings import check_quorums
from magnetar.bookkeeper.client.transport import BookieId
from magnetar.bookkeeper.protocol import DigestType
from magnetar.bookkeeper.runtime import IllegalTransitionError, TransitionTable

FORMAT_HEADER = "MagnetarLedgerMetadataFormatVersion"
FORMAT_VERSION = 1
INVALID_ENTRY_ID = -1


class LedgerState(enum.IntEnum):
    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


LEDGER_STATE_MOVES: TransitionTable[LedgerState] = TransitionTable(
    "ledger metadata",
    {
        LedgerState.OPEN: {LedgerState.IN_RECOVERY, LedgerState.CLOSED},
        LedgerState.IN_RECOVERY: {LedgerState.CLOSED},
        LedgerState.CLOSED: set(),
    },
)
"""The only state changes of ledger metadata (docs/architecture.md §3, rule 4): OPEN -> IN_RECOVERY (a
recoverer fenced it), OPEN -> CLOSED (its writer closed it), IN_RECOVERY -> CLOSED (the recoverer closed
it). A closed ledger never changes state again; :meth:`LedgerMetadata.in_recovery` and
:meth:`LedgerMetadata.closed` (the only derivations that change the state) and every compare-and-set of the
update loop check it."""


class MetadataFormatError(ValueError):
    """Stored metadata that cannot be parsed or violates the metadata rules."""


Ensemble = tuple[BookieId, ...]


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[tuple[int, Ensemble], ...]
    """(first entry id, bookies) in increasing first-entry order."""
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = INVALID_ENTRY_ID
    length: int = 0
    digest_type: DigestType | None = None
    password: bytes | None = field(default=None, repr=False)
    """Recorded so that the ledger's owner (and recovery tools) can open it without being told it, as
    BookKeeper's metadata records it; never shown in a repr or a log line."""
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    ctime_ms: int = 0
    creator_token: int = 0

    def __post_init__(self) -> None:
        try:
            check_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)
        except ValueError as exc:
            raise MetadataFormatError(str(exc)) from None
        if not self.ensembles:
            raise MetadataFormatError("ledger metadata needs at least one ensemble")
        previous = -1
        for first, members in self.ensembles:
            if first <= previous:
                raise MetadataFormatError(f"ensemble keys must increase strictly: {first} after {previous}")
            if len(members) != self.ensemble_size or len(set(members)) != len(members):
                raise MetadataFormatError(f"ensemble {list(members)} must hold {self.ensemble_size} bookies")
            previous = first
        if self.ensembles[0][0] != 0:
            raise MetadataFormatError("the first ensemble must start at entry 0")
        if self.state is LedgerState.CLOSED:
            if self.last_entry_id < INVALID_ENTRY_ID or self.length < 0:
                raise MetadataFormatError("a closed ledger needs lastEntryId >= -1 and length >= 0")
        elif self.last_entry_id != INVALID_ENTRY_ID or self.length != 0:
            raise MetadataFormatError("lastEntryId and length are set only when the ledger is CLOSED")
        if (self.digest_type is None) != (self.password is None):
            raise MetadataFormatError("digest type and password are both set or both unset")

    # -- queries -------------------------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_ensemble(self) -> tuple[int, Ensemble]:
        return self.ensembles[-1]

    def ensemble_for(self, entry_id: int) -> Ensemble:
        """The ensemble that stores ``entry_id`` (the one with the greatest first entry <= it)."""
        chosen = self.ensembles[0][1]
        for first, members in self.ensembles:
            if first > entry_id:
                break
            chosen = members
        return chosen

    # -- derivations (transforms of the update loop) --------------------------------------------------------

    def with_ensemble(self, first_entry_id: int, members: Sequence[BookieId]) -> LedgerMetadata:
        """Add an ensemble starting at ``first_entry_id``, replacing the last one if it starts there."""
        last_first = self.ensembles[-1][0]
        if first_entry_id < last_first:
            raise MetadataFormatError(f"new ensemble at {first_entry_id} precedes the last at {last_first}")
        kept = self.ensembles[:-1] if first_entry_id == last_first else self.ensembles
        return replace(self, ensembles=(*kept, (first_entry_id, tuple(members))))

    def with_bookies_replaced(
        self, first_entry_id: int, replacements: Mapping[int, BookieId]
    ) -> LedgerMetadata:
        """Re-replication (BookKeeper's ``replaceEnsembleEntry``): the ensemble starting at ``first_entry_id``
        with the bookies at the given indices replaced; every other ensemble, the state and the end stay."""
        ensembles = list(self.ensembles)
        for position, (first, members) in enumerate(ensembles):
            if first == first_entry_id:
                new = list(members)
                for index, bookie in replacements.items():
                    new[index] = bookie
                ensembles[position] = (first, tuple(new))
                return replace(self, ensembles=tuple(ensembles))
        raise MetadataFormatError(f"no ensemble starts at entry {first_entry_id}")

    def fragment_end(self, position: int) -> int | None:
        """The last entry of the ``position``-th ensemble's fragment; None for the last ensemble of a ledger
        that is not closed (its end is not known yet). May be ``first - 1``: an empty fragment."""
        if position + 1 < len(self.ensembles):
            return self.ensembles[position + 1][0] - 1
        return self.last_entry_id if self.is_closed else None

    def in_recovery(self) -> LedgerMetadata:
        """OPEN -> IN_RECOVERY (refused from any other state: see :data:`LEDGER_STATE_MOVES`)."""
        target = LedgerState.IN_RECOVERY
        state = LEDGER_STATE_MOVES.check("", self.state, target, "recovery fences the ledger")
        return replace(self, state=state)

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        """OPEN or IN_RECOVERY -> CLOSED at ``last_entry_id`` (see :data:`LEDGER_STATE_MOVES`)."""
        state = LEDGER_STATE_MOVES.check(
            "", self.state, LedgerState.CLOSED, f"closing at entry {last_entry_id}, length {length}"
        )
        return replace(self, state=state, last_entry_id=last_entry_id, length=length)

    def check_successor(self, ledger_id: int, new: LedgerMetadata) -> None:
        """Refuse ``new`` as the next stored value of this metadata if its state move is not in the table,
        or if it changes the end of a closed ledger (rule 4)."""
        if new.state is not self.state:
            LEDGER_STATE_MOVES.check(f"of ledger {ledger_id}", self.state, new.state, "compare-and-set")
        elif self.is_closed and (new.last_entry_id, new.length) != (self.last_entry_id, self.length):
            raise IllegalTransitionError(
                LEDGER_STATE_MOVES.machine,
                f"of ledger {ledger_id}",
                self.state,
                new.state,
                f"a closed ledger's end moved from entry {self.last_entry_id} to {new.last_entry_id}",
                (),
            )

    # -- serialization -----------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {
            "state": self.state.name,
            "ensembleSize": self.ensemble_size,
            "quorumSize": self.write_quorum,
            "ackQuorumSize": self.ack_quorum,
            "lastEntryId": self.last_entry_id,
            "length": self.length,
            "segment": [{"firstEntryId": f, "ensembleMember": list(m)} for f, m in self.ensembles],
            "digestType": None if self.digest_type is None else self.digest_type.name,
            "password": None if self.password is None else _b64(self.password),
            "ctime": self.ctime_ms,
            "cToken": self.creator_token,
            "customMetadata": {k: _b64(v) for k, v in sorted(self.custom_metadata.items())},
        }
        return f"{FORMAT_HEADER}\t{FORMAT_VERSION}\n{json.dumps(doc, sort_keys=True)}".encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerMetadata:
        try:
            header, _, body = data.decode().partition("\n")
            name, _, version = header.partition("\t")
            if name != FORMAT_HEADER or version != str(FORMAT_VERSION):
                raise MetadataFormatError(f"unknown ledger metadata format {header!r}")
            doc = json.loads(body)
            digest = doc["digestType"]
            password = doc["password"]
            return cls(
                ensemble_size=int(doc["ensembleSize"]),
                write_quorum=int(doc["quorumSize"]),
                ack_quorum=int(doc.get("ackQuorumSize", doc["quorumSize"])),
                ensembles=tuple(
                    (int(s["firstEntryId"]), tuple(str(b) for b in s["ensembleMember"]))
                    for s in doc["segment"]
                ),
                state=LedgerState[doc["state"]],
                last_entry_id=int(doc["lastEntryId"]),
                length=int(doc["length"]),
                digest_type=None if digest is None else DigestType[digest],
                password=None if password is None else base64.b64decode(password, validate=True),
                custom_metadata={
                    str(k): base64.b64decode(v, validate=True) for k, v in doc["customMetadata"].items()
                },
                ctime_ms=int(doc["ctime"]),
                creator_token=int(doc["cToken"]),
            )
        except MetadataFormatError:
            raise
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MetadataFormatError(f"unreadable ledger metadata: {exc!r}") from None


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


@dataclass(frozen=True, slots=True)
class Versioned:
    """Metadata with the store version it was read or written at (the CAS token)."""

    metadata: LedgerMetadata
    version: int
