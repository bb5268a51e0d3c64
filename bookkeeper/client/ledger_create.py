"""Creating a ledger (BookKeeper's ``LedgerCreateOp``).

Choose an ensemble of E writable bookies, take a new ledger id from the store, and create the metadata node
(OPEN, one ensemble from entry 0, digest type and password, custom metadata, ctime, and a random creator
token). If the node already exists, the token tells a retried create of our own (adopt it) from an id
collision (take another id; at most ``ledger_id_retries_max`` times).
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.errors import IncorrectParameterError, LedgerExistsError
from magnetar.bookkeeper.client.ledger_handle import LedgerHandle
from magnetar.bookkeeper.client.metadata import LedgerMetadata, Versioned
from magnetar.bookkeeper.client.settings import check_quorums
from magnetar.bookkeeper.protocol import Digester, DigestType, master_key


class LedgerCreateOp:
    def __init__(
        self,
        ctx: ClientContext,
        *,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        digest_type: DigestType,
        password: bytes,
        custom_metadata: Mapping[str, bytes],
    ) -> None:
        try:
            check_quorums(ensemble_size, write_quorum, ack_quorum)
        except ValueError as exc:
            raise IncorrectParameterError(str(exc)) from None
        self._ctx = ctx
        self._quorums = (ensemble_size, write_quorum, ack_quorum)
        self._digest_type = digest_type
        self._password = bytes(password)
        self._custom = {str(k): bytes(v) for k, v in custom_metadata.items()}

    async def run(self) -> LedgerHandle:
        ctx = self._ctx
        ensemble_size, write_quorum, ack_quorum = self._quorums
        ensemble = await ctx.placement.new_ensemble(ensemble_size, write_quorum=write_quorum)
        token = ctx.rng.getrandbits(62) + 1
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            ensembles=((0, tuple(ensemble)),),
            digest_type=self._digest_type,
            password=self._password,
            custom_metadata=self._custom,
            ctime_ms=ctx.clock.time_ms(),
            creator_token=token,
        )
        versioned: Versioned | None = None
        ledger_id = -1
        for _ in range(ctx.settings.ledger_id_retries_max):
            ledger_id = await ctx.manager.generate_id()
            try:
                versioned = await ctx.manager.create(ledger_id, metadata)
                break
            except LedgerExistsError:
                existing = await ctx.manager.read(ledger_id)
                if existing.metadata.creator_token == token:
                    versioned = existing
                    break
        if versioned is None:
            raise LedgerExistsError(
                f"no free ledger id after ledger_id_retries_max={ctx.settings.ledger_id_retries_max}"
            )
        digester = Digester(self._digest_type, self._password)
        return LedgerHandle(ctx, ledger_id, versioned, digester, master_key(self._password))
