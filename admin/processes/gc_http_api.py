"""The bookie's garbage-collection HTTP endpoints, served by a bookie process (BookKeeper's names, reference:
its Admin REST API).

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

One process may host several bookies (``magnetar standalone``): at these paths every endpoint then acts on
all of them, and the listings carry a ``bookieId`` each; under ``/bookies/{bookieId}`` on one of them (the
routes' :data:`~magnetar.bookkeeper.bookie.http_api.Select`). Every endpoint is an operator's: it asks the
:class:`~magnetar.bookkeeper.bookie.http_api.HttpAccess` it was given before it reads the body (a superuser
when authentication is on). A body that is not a JSON object - malformed, nested too deeply for the parser,
a field it does not take, a flag that is not a boolean - is answered 400 with the reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import trio

from magnetar.bookkeeper.bookie import HttpAccess, Select, head_check
from magnetar.bookkeeper.bookie.storage import log_file_name
from magnetar.bookkeeper.runtime.http import HttpError, HttpRequest, HttpResponse, Router, json_response
from magnetar.gc import BookieGarbageCollector

FILE_TYPES = {"journal": "journal files", "entrylog": "entrylog files", "index": "index files"}


def add_gc_routes(
    router: Router, select: Select[BookieGarbageCollector], access: HttpAccess, prefix: str = ""
) -> None:
    """The GC endpoints under ``prefix`` for the collectors ``select`` picks, each checked by ``access``."""

    async def gc_trigger(request: HttpRequest) -> HttpResponse:
        collectors = select(request)
        body = _body(request, ("forceMajor", "forceMinor"))
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
        forced = any(gc.in_forced_pass for gc in select(request))
        return json_response({"is_in_force_gc": str(forced).lower()})

    async def gc_details(request: HttpRequest) -> HttpResponse:
        return json_response([gc.details() for gc in select(request)])

    async def suspend(request: HttpRequest) -> HttpResponse:
        collectors = select(request)
        body = _body(request, ("suspendMajor", "suspendMinor"))
        for gc in collectors:
            gc.suspend(
                major=_flag(body, "suspendMajor", default=False),
                minor=_flag(body, "suspendMinor", default=False),
            )
        return await suspended(request)

    async def suspended(request: HttpRequest) -> HttpResponse:
        collectors = select(request)
        return json_response(
            {
                "isMajorGcSuspended": str(any(gc.suspended["major"] for gc in collectors)).lower(),
                "isMinorGcSuspended": str(any(gc.suspended["minor"] for gc in collectors)).lower(),
            }
        )

    async def resume(request: HttpRequest) -> HttpResponse:
        collectors = select(request)
        body = _body(request, ("resumeMajor", "resumeMinor"))
        for gc in collectors:
            gc.resume(
                major=_flag(body, "resumeMajor", default=False),
                minor=_flag(body, "resumeMinor", default=False),
            )
        return await suspended(request)

    async def list_disk_file(request: HttpRequest) -> HttpResponse:
        collectors = select(request)
        wanted = request.query.get("file_type")
        if wanted is not None and wanted not in FILE_TYPES:
            raise HttpError(400, f"file_type must be one of {sorted(FILE_TYPES)}")
        kinds = [wanted] if wanted else list(FILE_TYPES)
        listing = [await trio.to_thread.run_sync(_list_files, gc, kinds) for gc in collectors]
        return json_response(listing[0] if len(listing) == 1 else listing)

    async def entry_log_usage(request: HttpRequest) -> HttpResponse:
        out = []
        for gc in select(request):
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

    def route(method: str, path: str, handler: Any) -> None:
        router.route(
            method, f"{prefix}/api/v1/bookie/{path}", handler, check=head_check(access.check_operator)
        )

    route("PUT", "gc", gc_trigger)
    route("GET", "gc", gc_state)
    route("GET", "gc_details", gc_details)
    route("PUT", "gc/suspend_compaction", suspend)
    route("GET", "gc/suspend_compaction", suspended)
    route("PUT", "gc/resume_compaction", resume)
    route("GET", "list_disk_file", list_disk_file)
    route("GET", "entry_log_usage", entry_log_usage)


def _body(request: HttpRequest, names: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object of the body ({} when empty), naming only ``names``; 400 with the reason otherwise."""
    if not request.body.strip():
        return {}
    try:
        body = json.loads(request.body)
    except RecursionError:
        raise HttpError(400, "invalid JSON body: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    unknown = sorted(set(body) - set(names))
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise HttpError(400, f"unknown field(s) {shown}: the body takes {', '.join(names)}")
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
