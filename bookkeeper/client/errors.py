"""The replication client's exceptions: one hierarchy, each class carrying BookKeeper's ``BKException`` code.

BookKeeper reports every client failure as a ``BKException`` with an integer code (``BKException.Code``);
callers switch on the code. Here each code is a subclass of :class:`BKError` with the same number in
``code``, so callers can catch by class (``except LedgerFencedError``) or compare codes. Bookie status codes
that come back from the wire are translated by :func:`error_for_status` (BookKeeper's
``BKException.create`` over the mapping in ``CompletionValue``).
"""

from __future__ import annotations

from magnetar.bookkeeper.protocol import BookieStatus


class BKError(Exception):
    """Base of every replication-client failure; ``code`` is BookKeeper's ``BKException.Code``."""

    code: int = -999  # UnexpectedConditionException

    def __init__(self, message: str = "") -> None:
        super().__init__(message or type(self).__name__)


class BKReadError(BKError):
    """A read failed on every replica that could serve it (bookie errors)."""

    code = -1


class DigestMismatchError(BKError):
    """Every replica returned an entry whose digest does not verify."""

    code = -5


class NotEnoughBookiesError(BKError):
    """Fewer writable bookies than the ensemble needs (after exclusions)."""

    code = -6


class NoSuchLedgerError(BKError):
    """The ledger's metadata does not exist (deleted or never created)."""

    code = -7


class BookieHandleNotAvailableError(BKError):
    """A bookie could not be reached."""

    code = -8


class LedgerRecoveryError(BKError):
    """Ledger recovery could not complete; the ledger stays IN_RECOVERY and may be recovered again."""

    code = -10


class LedgerClosedError(BKError):
    """The ledger is closed: no more adds."""

    code = -11


class BKWriteError(BKError):
    code = -12


class NoSuchEntryError(BKError):
    """The entry does not exist (enough replicas said so)."""

    code = -13


class IncorrectParameterError(BKError, ValueError):
    code = -14


class MetadataVersionError(BKError):
    """A metadata compare-and-set lost against a change it cannot reconcile (or ran out of retries)."""

    code = -17


class MetaStoreError(BKError):
    """The metadata store failed (unavailable, value too large, ...)."""

    code = -18


class ClientClosedError(BKError):
    code = -19


class LedgerExistsError(BKError):
    code = -20


class BKTimeoutError(BKError):
    code = -23


class IllegalOpError(BKError):
    code = -100


class LedgerFencedError(BKError):
    """The ledger was fenced by a recovering client: the outcome of unacknowledged adds is unknown."""

    code = -101


class UnauthorizedError(BKError):
    """Wrong password / master key (bookie EUA)."""

    code = -102


class WriteOnReadOnlyBookieError(BKError):
    code = -104


class TooManyRequestsError(BKError):
    """A bookie is overloaded (ETOOMANYREQUESTS), or a client-side in-flight limit was hit."""

    code = -105


_STATUS_ERRORS: dict[BookieStatus, type[BKError]] = {
    BookieStatus.ENOLEDGER: NoSuchLedgerError,
    BookieStatus.ENOENTRY: NoSuchEntryError,
    BookieStatus.EBADREQ: IllegalOpError,
    BookieStatus.EUA: UnauthorizedError,
    BookieStatus.EFENCED: LedgerFencedError,
    BookieStatus.EREADONLY: WriteOnReadOnlyBookieError,
    BookieStatus.ETOOMANYREQUESTS: TooManyRequestsError,
}


def error_for_status(status: BookieStatus, detail: str = "") -> BKError:
    """The client exception for a bookie status (EIO and unknown states become a read/write error)."""
    cls = _STATUS_ERRORS.get(status, BKReadError)
    return cls(f"bookie answered {status.name}" + (f": {detail}" if detail else ""))
