"""What an upstream upgrade carries (sans-IO): the client's own request target and credentials.

Theory of operation. The proxy must open on the owner exactly the session the broker the client reached has
authorized, for the same caller. So it re-sends what the client wrote instead of rebuilding it:

* the target: the client's percent-encoded path (or a partition's path derived from it by inserting
  ``-partition-<i>``) and its query as received, never decoded and encoded again. The HTTP layer accepted
  the target only if every byte is an RFC 3986 path or query character (:mod:`magnetar.bookkeeper.runtime.
  http.request_target`), so the owner's parser reads the same names from it as this broker's did. Only the
  parameters the proxy must change when it follows a move
  (:meth:`magnetar.broker.protocols.relay_tracking.Tracker.query_overrides`, e.g. a reader's ``messageId``)
  are replaced, by name;
* the credentials: the client's ``Authorization`` header, as received, and its ``token`` query parameter,
  which stays in the query. The owner authenticates and authorizes the client's own role; a client that
  presented nothing is the owner's anonymous caller (``anonymous_user_role``) as it was here. The broker
  adds nothing of its own, so the hop can never do more than the client could do on the owner directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote_plus

from magnetar.bookkeeper.runtime.http import RequestHead

CREDENTIAL_HEADER = "authorization"


def upstream_target(path: str, client_target: str, overrides: Mapping[str, str]) -> str:
    """``path`` and the query of ``client_target`` (the client's request target as received), with every
    parameter named in ``overrides`` replaced by the override's value."""
    query = client_target.partition("?")[2]
    if overrides:
        fields = (
            [f for f in query.split("&") if unquote_plus(f.partition("=")[0]) not in overrides]
            if query
            else []
        )
        fields += [f"{quote(name, safe='')}={quote(value, safe='')}" for name, value in overrides.items()]
        query = "&".join(fields)
    return f"{path}?{query}" if query else path


def client_credentials(head: RequestHead) -> list[tuple[str, str]]:
    """The headers carrying the client's credentials to the owner: its ``Authorization`` header (the first,
    the one authentication reads), if it sent one."""
    value = head.header(CREDENTIAL_HEADER)
    return [] if value is None else [(CREDENTIAL_HEADER, value)]
