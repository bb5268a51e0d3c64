"""Pulsar's ``PersistentTopicInternalStats`` for a managed ledger (docs/upstream.md, Pulsar §2.6).

The open (current) ledger is listed with ``entries: 0, size: 0`` and its live figures are in
``currentLedgerEntries`` / ``currentLedgerSize``, as Pulsar reports them (tools such as the Spark connector
depend on that quirk).
"""

from __future__ import annotations

import datetime
from typing import Any

from magnetar.managed_ledger.ledger import ManagedLedger


def iso_ms(epoch_ms: int) -> str | None:
    if epoch_ms <= 0:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def internal_stats(ml: ManagedLedger) -> dict[str, Any]:
    current = ml.ledgers.get(ml.current_ledger_id)
    ledgers = []
    for info in ml.ledgers:
        is_current = current is not None and info.ledger_id == current.ledger_id
        ledgers.append(
            {
                "ledgerId": info.ledger_id,
                "entries": 0 if is_current else info.entries,
                "size": 0 if is_current else info.size_bytes,
                "offloaded": False,
                "metadata": None,
                "underReplicated": False,
            }
        )
    cursors = {}
    for name, cursor in ml.cursors.items():
        cursors[name] = {
            "markDeletePosition": str(cursor.mark_delete),
            "readPosition": str(cursor.read_position),
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": cursor.messages_consumed_counter,
            "cursorLedger": -1,
            "cursorLedgerLastEntry": -1,
            "individuallyDeletedMessages": cursor.individually_deleted_messages(),
            "lastLedgerSwitchTimestamp": None,
            "state": "Open",
            "numberOfEntriesSinceFirstNotAckedMessage": 0,
            "totalNonContiguousDeletedMessagesRange": len(cursor.acked_ranges),
            "subscriptionHavePendingRead": False,
            "subscriptionHavePendingReplayRead": False,
            "properties": dict(cursor.properties),
        }
    return {
        "entriesAddedCounter": ml.entries_added_counter,
        "numberOfEntries": ml.number_of_entries(),
        "totalSize": ml.total_size(),
        "currentLedgerEntries": current.entries if current else 0,
        "currentLedgerSize": current.size_bytes if current else 0,
        "lastLedgerCreatedTimestamp": iso_ms(ml.last_ledger_created_ms),
        "lastLedgerCreationFailureTimestamp": None,
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": ml.pending_adds,
        "lastConfirmedEntry": str(ml.last_confirmed),
        "state": ml.state.value,
        "ledgers": ledgers,
        "cursors": cursors,
        "schemaLedgers": [],
        "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False},
    }
