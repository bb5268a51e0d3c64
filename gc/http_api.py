"""The bookie's garbage-collection HTTP endpoints (BookKeeper's names, reference: its Admin REST API).

* ``PUT /api/v1/bookie/gc`` - trigger a pass; optional JSON body ``{"forceMajor": bool, "forceMinor": bool}``
  (as BookKeeper: no body forces both, a body forces what it names). ``?wait=true`` answers when the pass is
  done, with its result. ``GET`` answers ``{"is_in_force_gc": "true"|"false"}``.
* ``GET /api/v1/bookie/gc_details`` - a list with one ``GarbageCollectionStatus`` per collector
  (``forceCompacting``, ``majorCompacting``, ``minorCompacting``, ``lastMajorCompactionTime``,
  ``lastMinorCompactionTime``, ``majorCompactionCounter``, ``minorCompactionCounter``) and more figures.
* ``PUT /api/v1/bookie/gc/suspend_compaction`` ``{"suspendMajor": bool, "suspendMinor": bool}``, ``GET`` it
  for ``{"isMajorGcSuspended", "isMinorGcSuspended"}``; ``PUT /api/v1/bookie/gc/resume_compaction``
  ``{"resumeMajor": bool, "resumeMinor": bool}``.
* ``GET /api/v1/bookie/list_disk_file?file_type=journal|entrylog|index`` - file names per kind, BookKeeper's
  format (``{"journal files": "a b", "entrylog files": "...", "index files": "..."}``).
* ``GET /api/v1/bookie/entry_log_usage`` - Magnetar's per-log listing: file size, total and remaining bytes,
  usage, ledgers, damaged logs; plus the disk figures.

One process may host several bookies (``magnetar standalone``): every endpoint then acts on all of them, and
the listings carry a ``bookieId`` each.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from magnetar.bookkeeper.bookie.entry_log import log_file_name
from magnetar.bookkeeper.runtime.http import HttpError, HttpRequest, HttpResponse, Router, json_response
from magnetar.gc.collector import BookieGarbageCollector

FILE_TYPES = {"journal": "journal files", "entrylog": "entrylog files", "index": "index files"}


def add_gc_routes(router: Router, collectors: Sequence[BookieGarbageCollector]) -> None:
    async def gc_trigger(request: HttpRequest) -> HttpResponse:
        body = _body(request)
        force_major = _flag(body, "forceMajor", default=not body)  # BookKeeper: no body forces both
        force_minor = _flag(body, "forceMinor", default=not body)
        if request.query.get("wait", "false").lower() == "true":
            results = []
            for gc in collectors:
                result = await gc.run_once(force_major=force_major, force_minor=force_minor)
                results.append({"bookieId": gc.name, "ok": result is not None, **_result_json(result)})
            return json_response(results)
        for gc in collectors:
            gc.trigger(force_major=force_major, force_minor=force_minor)
        return json_response({"is_in_force_gc": "true"})

    async def gc_state(request: HttpRequest) -> HttpResponse:
        forced = any(gc.in_forced_pass for gc in collectors)
        return json_response({"is_in_force_gc": str(forced).lower()})

    async def gc_details(request: HttpRequest) -> HttpResponse:
        return json_response([gc.details() for gc in collectors])

    async def suspend(request: HttpRequest) -> HttpResponse:
        body = _body(request)
        for gc in collectors:
            gc.suspend(
                major=_flag(body, "suspendMajor", default=False),
                minor=_flag(body, "suspendMinor", default=False),
            )
        return await suspended(request)

    async def suspended(request: HttpRequest) -> HttpResponse:
        return json_response(
            {
                "isMajorGcSuspended": str(any(gc.suspended["major"] for gc in collectors)).lower(),
                "isMinorGcSuspended": str(any(gc.suspended["minor"] for gc in collectors)).lower(),
            }
        )

    async def resume(request: HttpRequest) -> HttpResponse:
        body = _body(request)
        for gc in collectors:
            gc.resume(
                major=_flag(body, "resumeMajor", default=False),
                minor=_flag(body, "resumeMinor", default=False),
            )
        return await suspended(request)

    async def list_disk_file(request: HttpRequest) -> HttpResponse:
        wanted = request.query.get("file_type")
        if wanted is not None and wanted not in FILE_TYPES:
            raise HttpError(400, f"file_type must be one of {sorted(FILE_TYPES)}")
        kinds = [wanted] if wanted else list(FILE_TYPES)
        listing = [await trio.to_thread.run_sync(_list_files, gc, kinds) for gc in collectors]
        return json_response(listing[0] if len(listing) == 1 else listing)

    async def entry_log_usage(request: HttpRequest) -> HttpResponse:
        out = []
        for gc in collectors:
            disk = gc.store.disk_usage()
            out.append(
                {
                    "bookieId": gc.name,
                    "totalSpace": disk.total_bytes,
                    "freeSpace": disk.free_bytes,
                    "diskUsage": round(disk.used_fraction, 6),
                    "entryLogs": [status.to_json() for status in gc.tracker.statuses()],
                }
            )
        return json_response(out)

    router.put("/api/v1/bookie/gc", gc_trigger)
    router.get("/api/v1/bookie/gc", gc_state)
    router.get("/api/v1/bookie/gc_details", gc_details)
    router.put("/api/v1/bookie/gc/suspend_compaction", suspend)
    router.get("/api/v1/bookie/gc/suspend_compaction", suspended)
    router.put("/api/v1/bookie/gc/resume_compaction", resume)
    router.get("/api/v1/bookie/list_disk_file", list_disk_file)
    router.get("/api/v1/bookie/entry_log_usage", entry_log_usage)


def _body(request: HttpRequest) -> dict[str, Any]:
    if not request.body.strip():
        return {}
    body = request.json()
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    return body


def _flag(body: dict[str, Any], name: str, *, default: bool) -> bool:
    value = body.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise HttpError(400, f"{name} must be true or false")


def _result_json(result: Any) -> dict[str, object]:
    if result is None:
        return {}
    return {
        "deletedLedgers": len(result.deleted_ledgers),
        "sealedActiveEntryLog": (
            log_file_name(result.sealed_active_log) if result.sealed_active_log is not None else None
        ),
        "deletedEntryLogs": len(result.deleted_logs),
        "reclaimedBytes": result.reclaimed_bytes,
        "compaction": result.compaction.to_json() if result.compaction else None,
        "compactionSkipped": result.compaction_skipped,
        "seconds": round(result.seconds, 3),
    }


def _list_files(gc: BookieGarbageCollector, kinds: list[str]) -> dict[str, object]:
    settings = gc.store.settings
    dirs = {
        "journal": settings.journal_path,
        "entrylog": settings.entry_log_path,
        "index": settings.index_path,
    }
    out: dict[str, object] = {"bookieId": gc.name}
    for kind in kinds:
        out[FILE_TYPES[kind]] = " ".join(_names(dirs[kind], kind))
    return out


def _names(directory: Path, kind: str) -> list[str]:
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    suffix = {"journal": ".txn", "entrylog": ".log"}.get(kind)
    return [n for n in names if suffix is None or n.endswith(suffix)]
