"""Where AutoRecovery keeps its state in the metadata store (BookKeeper's ``/ledgers/underreplication`` tree).

Everything lives under ``<root>/underreplication`` (``root`` is the ledgers root, ``/ledgers``):

* ``ledgers/<4 x 16-bit hex>/urL<10-digit id>`` - one node per under-replicated ledger. The ledger id's 64
  bits are split into four 16-bit groups written as 4 hex digits each (ledger 1 ->
  ``ledgers/0000/0000/0000/0001/urL0000000001``), as BookKeeper's ``getParentZnodePath``, so no node gets
  too many children. The value names the bookies found missing (:mod:`magnetar.bookkeeper.autorecovery`).
* ``locks/urL<10-digit id>`` - an *ephemeral* node held by the replication worker (or the decommission) that
  is working on the ledger; it vanishes with the holder's session.
* ``auditorelection/V_<sequence>`` - the AutoRecovery daemons' ephemeral-sequential votes; the lowest
  sequence is the auditor.
* ``disable`` - while this node exists, replication is switched off cluster-wide (``autorecovery -disable``).
* ``lostBookieRecoveryDelay`` - the live value of ``lost_bookie_recovery_delay_s`` (decimal seconds).
* ``decommissioning/<bookieId>`` - Magnetar's own: bookies being (or that were) decommissioned. New ensembles
  avoid them and AutoRecovery treats them as lost even while they run.

The paths are in the metadata layer because the replication client's placement (new ensembles avoid
decommissioning bookies) and AutoRecovery both read them.
"""

from __future__ import annotations

from magnetar.bookkeeper.metadata.ledger_paths import LEDGERS_ROOT

UNDERREPLICATION = "underreplication"
UR_PREFIX = "urL"
VOTE_PREFIX = "V_"


def underreplication_path(root: str = LEDGERS_ROOT) -> str:
    return f"{root}/{UNDERREPLICATION}"


def ur_ledgers_path(root: str = LEDGERS_ROOT) -> str:
    return f"{underreplication_path(root)}/ledgers"


def ur_locks_path(root: str = LEDGERS_ROOT) -> str:
    return f"{underreplication_path(root)}/locks"


def auditor_election_path(root: str = LEDGERS_ROOT) -> str:
    return f"{underreplication_path(root)}/auditorelection"


def disable_path(root: str = LEDGERS_ROOT) -> str:
    return f"{underreplication_path(root)}/disable"


def lost_bookie_recovery_delay_path(root: str = LEDGERS_ROOT) -> str:
    return f"{underreplication_path(root)}/lostBookieRecoveryDelay"


def decommissioning_path(root: str = LEDGERS_ROOT) -> str:
    return f"{underreplication_path(root)}/decommissioning"


def ur_node_name(ledger_id: int) -> str:
    return f"{UR_PREFIX}{ledger_id:010d}"


def ur_ledger_path(ledger_id: int, root: str = LEDGERS_ROOT) -> str:
    """The mark of ``ledger_id``: ``<root>/underreplication/ledgers/hhhh/hhhh/hhhh/hhhh/urL<id>``."""
    if ledger_id < 0:
        raise ValueError(f"ledger id must be >= 0, got {ledger_id}")
    groups = "/".join(f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))
    return f"{ur_ledgers_path(root)}/{groups}/{ur_node_name(ledger_id)}"


def ur_lock_path(ledger_id: int, root: str = LEDGERS_ROOT) -> str:
    return f"{ur_locks_path(root)}/{ur_node_name(ledger_id)}"


def ledger_id_of_ur_node(name: str) -> int | None:
    """The ledger id a mark or lock node is named after (``urL0000000001`` -> 1), or None."""
    digits = name.removeprefix(UR_PREFIX)
    if digits == name or not digits.isdigit():
        return None
    return int(digits)
