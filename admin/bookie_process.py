"""The bookie process (``magnetar bookie``): the composition root that wires a bookie together.

It opens the metadata store, builds the ledger store named by ``storage``, serves the bookie protocol and
registers the bookie (``/ledgers/available/<host:port>``).

Discovering the port (``--port 0``): once the bookie serves and is registered it prints one JSON line on
stdout, ``{"event": "bookie-ready", "bookieId": ..., "host": ..., "port": ...}``, and, with
``--port-file PATH``, writes the same document to PATH atomically (removed again on a clean exit). Logs go to
stderr. SIGTERM or SIGINT stops it in order: drain connections, unregister, close the store; exit code 0.
A startup failure (port in use, bookie id held by another session, bad settings) exits non-zero with a log
line saying why.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import trio

from magnetar.bookkeeper.bookie.memory_store import MemoryLedgerStore
from magnetar.bookkeeper.bookie.server import Bookie, BookieEndpoint
from magnetar.bookkeeper.bookie.settings import BookieSettings
from magnetar.bookkeeper.metadata.factory import open_metadata_store

log = logging.getLogger("magnetar.bookie")

EXIT_FAILED = 1
EXIT_USAGE = 2


def main(overrides: dict[str, Any]) -> int:
    try:
        settings = BookieSettings(**overrides)
    except pydantic.ValidationError as exc:
        log.error("invalid bookie settings: %s", exc)
        return EXIT_USAGE
    try:
        return trio.run(serve, settings)
    except Exception as exc:  # ExceptionGroup included
        log.error("bookie failed: %s", _describe(exc), exc_info=log.isEnabledFor(logging.DEBUG))
        return EXIT_FAILED


async def serve(settings: BookieSettings) -> int:
    async with open_metadata_store(settings.metadata_url) as metadata:
        store = MemoryLedgerStore(capacity_bytes=settings.memory_store_bytes_max)
        log.info("ledger storage: %s (%d bytes)", settings.storage, settings.memory_store_bytes_max)
        bookie = Bookie(settings, store, metadata)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.run)
                endpoint = await nursery.start(bookie.run)
                announce(settings, endpoint)
                nursery.start_soon(_stop_on_signal, signals, bookie)
                await bookie.stopped.wait()
                store.close()
                log.info("ledger storage closed")
                nursery.cancel_scope.cancel()
        if settings.port_file is not None:
            settings.port_file.unlink(missing_ok=True)
    log.info("bookie %s exited cleanly", endpoint.bookie_id)
    return 0


async def _stop_on_signal(signals: AsyncIterator[int], bookie: Bookie) -> None:
    async for signum in signals:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        bookie.request_stop()
        return


def announce(settings: BookieSettings, endpoint: BookieEndpoint) -> None:
    """Print the ready line on stdout and write the port file."""
    document = json.dumps(
        {
            "event": "bookie-ready",
            "bookieId": endpoint.bookie_id,
            "host": endpoint.host,
            "port": endpoint.port,
        }
    )
    if settings.port_file is not None:
        temporary = settings.port_file.with_name(settings.port_file.name + ".tmp")
        temporary.write_text(document + "\n")
        os.replace(temporary, settings.port_file)
    print(document, flush=True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"
