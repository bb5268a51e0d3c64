"""Opening a ledger for reading (BookKeeper's ``LedgerOpenOp``).

Read the metadata; a stored password must match the one given (else :class:`UnauthorizedError`, as
BookKeeper's ``BKUnauthorizedAccessException``); the stored digest type is used. With
``use_stored_password`` (BookKeeper's administrative open, ``BookKeeperAdmin.openLedger``) the password
recorded in the metadata is used instead, and the one given only for a ledger that records none: the
managed ledger opens its own ledgers so, so that ledgers written with an earlier password (or with the empty
one, before ledger passwords were set) stay readable and recoverable. The password yields the master key
(``SHA1("ledger" || password)``) that fencing and recovery reads carry and that the bookies compare with the
one recorded at the ledger's first add.

A CLOSED ledger needs nothing more. Otherwise, with ``recovery=True`` the ledger is fenced and recovered
(:class:`~.recovery.LedgerRecoveryOp`) and the handle sees the closed result; with ``recovery=False``
(``openLedgerNoRecovery``) nothing is fenced and the handle's LAC starts at -1.
"""

from __future__ import annotations

import hmac

from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.errors import BKError, UnauthorizedError
from magnetar.bookkeeper.client.read_handle import ReadHandle
from magnetar.bookkeeper.client.recovery import LedgerRecoveryOp
from magnetar.bookkeeper.protocol import Digester, master_key


class LedgerOpenOp:
    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        password: bytes,
        *,
        recovery: bool,
        use_stored_password: bool = False,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._password = bytes(password)
        self._recovery = recovery
        self._use_stored_password = use_stored_password

    async def run(self) -> ReadHandle:
        ctx = self._ctx
        versioned = await ctx.manager.read(self._ledger_id)
        md = versioned.metadata
        password = self._password
        if md.password is not None:
            if self._use_stored_password:
                password = md.password
            elif not hmac.compare_digest(md.password, password):
                raise UnauthorizedError(f"ledger {self._ledger_id}: wrong password")
        digester = Digester(md.digest_type or ctx.settings.digest_type, password)
        if self._recovery and not md.is_closed:
            op = LedgerRecoveryOp(ctx, self._ledger_id, versioned, digester, master_key(password))
            try:
                versioned = await op.run()
            except BKError:
                ctx.stats.recovery_failures += 1
                raise
            ctx.stats.recoveries += 1
        return ReadHandle(ctx, self._ledger_id, versioned, digester)
