"""The size chain of a message, checked once across the layers' settings.

A published message passes four bounds on its way to the disk, each a setting of its own layer:

1. the WebSocket message that carries it (the broker's ``ws_frame_bytes_max``, Pulsar's ``maxMessageSize``);
2. the entry payload the replication client accepts (``entry_payload_bytes_max``);
3. the packaged entry a bookie stores (``storage_engine.entry_bytes_max``): the payload plus the digest header
   and code;
4. the frame of a bookie request or response (the bookie's ``frame_bytes_max``, and the broker's own bookie
   connections', which keep BookKeeper's 5 MiB): the packaged entry plus the request header and master key.

Each bound must carry what the one before it admits, less or plus the envelope of at most
:data:`ENVELOPE_BYTES` a layer adds or strips (the WebSocket framing, the entry's digest, the request's
header). A combination where a later bound is smaller is impossible: a message the WebSocket accepts could
never be stored, or an entry the client sends would be refused by every bookie, one ensemble change after
another. :func:`check_size_chain` refuses it at start with a message naming both settings and the fix. The
shipped defaults are exactly at the bound: 5 MiB WebSocket messages, entries of 5 MiB - 1 KiB, bookie
entries and frames of 5 MiB.

Which links a process checks depends on what it holds: a broker the first (and the second against its own
bookie connections' frame size), a bookie the last, the standalone all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

ENVELOPE_BYTES = 1024
"""What one layer adds around a payload at most: the digest header (32 bytes) and code (up to 32), the add
request's header, ids and master key (under 100), the frame prefix (16), rounded up to 1 KiB as the default
``entry_payload_bytes_max`` (5 MiB - 1 KiB) leaves it."""


@dataclass(frozen=True, slots=True)
class SizeLimit:
    """One bound of the chain: the setting's name as a user sets it (or what the bound is, when no setting
    changes it: ``settable`` false), and its value in bytes."""

    setting: str
    bytes_max: int
    settable: bool = True


def _refusal(bound: SizeLimit, needed: int, source: SizeLimit, what: str) -> ValueError:
    fix = f"raise {bound.setting} to at least {needed} or " if bound.settable else ""
    lower = source.bytes_max - (needed - bound.bytes_max)
    return ValueError(
        f"{bound.setting}={bound.bytes_max} cannot carry the {what} {source.setting}={source.bytes_max} "
        f"admits ({needed} bytes): {fix}lower {source.setting} to at most {lower}"
    )


def check_size_chain(
    *,
    ws_frame: SizeLimit | None = None,
    entry_payload: SizeLimit | None = None,
    bookie_entry: SizeLimit | None = None,
    bookie_frames: tuple[SizeLimit, ...] = (),
) -> None:
    """Raise ``ValueError`` naming both settings of the first link that cannot carry what the one before it
    admits (links whose settings the caller does not hold are skipped)."""
    if ws_frame is not None and entry_payload is not None:
        needed = ws_frame.bytes_max - ENVELOPE_BYTES  # the largest payload a WebSocket message carries
        if entry_payload.bytes_max < needed:
            raise _refusal(entry_payload, needed, ws_frame, "messages")
    if entry_payload is None:
        return
    needed = entry_payload.bytes_max + ENVELOPE_BYTES  # an entry with its digest, in a request frame
    for bound in (bookie_entry, *bookie_frames):
        if bound is not None and bound.bytes_max < needed:
            raise _refusal(bound, needed, entry_payload, "entries")
