"""Connecting a ``magnetar perf`` session (:mod:`.ws`) to the broker: the topics' WebSocket paths, the token,
the owner found by lookup (``--lookup``), and :func:`connect`, which retries what may pass for
``--reconnect-timeout-s`` and stops the run at once (:class:`~.ws_stats.PerfFailure`) on a refusal no retry
fixes: an upgrade refused with 400, 401, 403, 404, 405 or 412, a session closed for authentication or
authorization (4005, 4006)."""

from __future__ import annotations

import argparse
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import orjson
import trio

from magnetar.admin.perf.ws_stats import PerfFailure
from magnetar.bookkeeper.runtime.auth.keys import read_token_setting
from magnetar.bookkeeper.runtime.http import WsClient, WsClosed, WsRejected
from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL

FATAL_UPGRADE_STATUSES = frozenset({101, 400, 401, 403, 404, 405, 412})
"""Refusals of the upgrade that no retry fixes (101: the handshake itself was wrong)."""
FATAL_CLOSE_CODES = frozenset({4005, 4006})
"""Sessions closed for authentication (Pulsar's code 5) or authorization (6)."""
LOOKUP_TIMEOUT_S = 10.0
"""How long one lookup may take before it counts as a failed connection attempt."""
RETRY_PAUSE_S = 0.2
RETRY_REPORT_INTERVAL_S = 5.0
"""A connection that keeps failing for the same reason is reported again after this long."""


# -- where a session connects ------------------------------------------------------------------------------


def auth_token(args: argparse.Namespace) -> str | None:
    setting = args.auth_token if args.auth_token is not None else os.environ.get("MAGNETAR_AUTH_TOKEN")
    return read_token_setting(setting, "--auth-token") if setting else None


def _with_token(url: str, args: argparse.Namespace) -> str:
    token = auth_token(args)
    if not token:
        return url
    return f"{url}{'&' if '?' in url else '?'}{urlencode({'token': token})}"


def _subprotocols(args: argparse.Namespace) -> list[str]:
    return [SUBPROTOCOL] if args.protocol == "binary" else []


def _path(topic: str) -> str:
    topic = topic.removeprefix("persistent://")
    parts = topic.split("/")
    if len(parts) == 1:
        parts = ["public", "default", *parts]
    return "persistent/" + "/".join(parts)


_TO_WS = {"https://": "wss://", "http://": "ws://"}
_TO_HTTP = {ws: http for http, ws in _TO_WS.items()}


def _rescheme(url: str, schemes: dict[str, str]) -> str:
    for old, new in schemes.items():
        if url.startswith(old):
            return new + url.removeprefix(old).rstrip("/")
    return url.rstrip("/")


def _base(url: str) -> str:
    """The WebSocket base of a broker URL: ``http(s)://`` becomes ``ws(s)://``."""
    return _rescheme(url, _TO_WS)


def _http_base(url: str) -> str:
    """The HTTP base of a broker URL (its WebSocket API and lookup share one port)."""
    return _rescheme(url, _TO_HTTP)


def topic_paths(args: argparse.Namespace) -> list[str]:
    """The ``persistent/tenant/ns/topic`` path of each topic of the run (``--topics``)."""
    if args.topics == 1:
        return [_path(args.topic)]
    return [_path(f"{args.topic}-{index}") for index in range(args.topics)]


@dataclass(frozen=True)
class Session:
    """What one producer or consumer connects to: its topic and the WebSocket path (with query) after the
    broker's base URL."""

    topic: str
    path: str


class _LookupFailed(Exception):
    """A lookup that may succeed when retried (no answer, 5xx, 429)."""


def _lookup_blocking(url: str, token: str | None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=LOOKUP_TIMEOUT_S) as response:
            answer = orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace")[:200]
        if exc.code in FATAL_UPGRADE_STATUSES:
            raise PerfFailure(f"lookup {_shown(url)} refused: {exc.code} {reason}") from None
        raise _LookupFailed(f"lookup answered {exc.code} {reason}") from None
    except (OSError, ValueError) as exc:
        raise _LookupFailed(f"lookup failed: {type(exc).__name__}: {exc}") from None
    owner = answer.get("httpUrlTls") if url.startswith("https://") else None
    owner = owner or answer.get("httpUrl")
    if not isinstance(owner, str) or "://" not in owner:
        raise PerfFailure(f"lookup {_shown(url)} answered no httpUrl: {answer!r}"[:300])
    return owner


async def _session_url(session: Session, args: argparse.Namespace) -> str:
    """The URL to connect ``session`` to: through ``--url``, or its topic's owner with ``--lookup``."""
    base = _base(args.url)
    if args.lookup:
        lookup = f"{_http_base(args.url)}/lookup/v2/topic/{session.topic}"
        owner = await trio.to_thread.run_sync(_lookup_blocking, lookup, auth_token(args))
        base = _base(owner)
    return _with_token(base + session.path, args)


def _shown(url: str) -> str:
    """A URL fit for messages: without its query (which may carry the token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


# -- connecting ----------------------------------------------------------------------------------------


async def connect(session: Session, args: argparse.Namespace, who: str) -> WsClient:
    """Connect, retrying what may pass (lost connections, failed lookups, 409, 429, 5xx) for
    ``--reconnect-timeout-s``; :class:`PerfFailure` at once for a refusal no retry fixes."""
    deadline = time.monotonic() + args.reconnect_timeout_s
    reported = ("", 0.0)
    url = _base(args.url) + session.path
    while True:
        try:
            url = await _session_url(session, args)
            return await WsClient.connect(url, subprotocols=_subprotocols(args))
        except _LookupFailed as exc:
            problem = str(exc)
        except WsRejected as exc:
            if exc.status in FATAL_UPGRADE_STATUSES:
                raise PerfFailure(
                    f"{who}: {_shown(url)} refused the connection: {exc.status} {exc.reason}"
                ) from None
            problem = f"refused: {exc.status} {exc.reason}"
        except (OSError, trio.TooSlowError) as exc:
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        now = time.monotonic()
        if now >= deadline:
            raise PerfFailure(
                f"{who}: no connection to {_shown(url)} for {args.reconnect_timeout_s:g} s "
                f"(--reconnect-timeout-s); last: {problem}"
            )
        if problem != reported[0] or now - reported[1] >= RETRY_REPORT_INTERVAL_S:
            print(f"{who}: connect failed ({problem}); retrying", flush=True)
            reported = (problem, now)
        await trio.sleep(RETRY_PAUSE_S)


def check_close(exc: BaseException, who: str) -> None:
    if isinstance(exc, WsClosed) and exc.code in FATAL_CLOSE_CODES:
        raise PerfFailure(f"{who}: the broker closed the session: {exc.code} {exc.reason}") from None
