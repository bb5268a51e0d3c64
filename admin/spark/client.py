"""A small blocking client of the admin REST API for the Spark source (driver and executors).

Spark calls the source from plain threads and worker processes, so this is ``http.client`` with one
keep-alive connection per broker, not trio. What it does beyond one request:

* 307 redirects to the owning broker are followed (Pulsar's admin API redirects topic calls to the owner with
  ``authoritative=true``; docs/upstream.md, Pulsar §2.1), at most ``REDIRECTS_MAX`` hops, and the owner is
  remembered per topic so the next call goes straight there;
* a keep-alive connection the broker closed while idle is reopened once (every call here is idempotent);
* failures become :class:`MagnetarSourceError` subclasses whose message names the URL and the broker's
  ``reason``, never a socket stack trace: :class:`BrokerUnreachableError`, :class:`TopicNotFoundError`,
  :class:`BrokerRequestError` (carrying the HTTP status).

:func:`shared_client` keeps one client per service URL in the process, so the tasks a Python worker runs
one after the other reuse its connections.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from magnetar.broker.wire import TopicName

REDIRECTS_MAX = 5
CONNECTIONS_MAX = 64
"""Brokers a client keeps a connection to; the least recently opened one is closed beyond this."""
SUBSCRIPTION_EARLIEST = "earliest"


class MagnetarSourceError(Exception):
    """Base of the Spark source's errors (the message is meant for the user)."""


class BrokerUnreachableError(MagnetarSourceError):
    pass


class TopicNotFoundError(MagnetarSourceError):
    pass


class BrokerRequestError(MagnetarSourceError):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def reason(self) -> str:
        try:
            data = json.loads(self.body)
        except ValueError:
            return self.body[:200].decode("utf-8", "replace")
        return str(data.get("reason", data)) if isinstance(data, dict) else str(data)


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname or "", parts.port or default


def topic_path(topic: TopicName) -> str:
    return f"/admin/v2/{topic.rest_path}"


class AdminClient:
    def __init__(self, service_url: str, timeout_s: float) -> None:
        self.service_url = service_url.rstrip("/")
        self.timeout_s = timeout_s
        self._connections: dict[tuple[str, str, int], http.client.HTTPConnection] = {}
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()

    # -- transport -------------------------------------------------------------------------------------

    def _connection(self, origin: tuple[str, str, int]) -> http.client.HTTPConnection:
        connection = self._connections.get(origin)
        if connection is None:
            if len(self._connections) >= CONNECTIONS_MAX:
                oldest = next(iter(self._connections))
                self._connections.pop(oldest).close()
            scheme, host, port = origin
            kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            connection = self._connections[origin] = kind(host, port, timeout=self.timeout_s)
        return connection

    def _exchange(self, base: str, method: str, target: str, body: bytes | None) -> tuple[int, str, bytes]:
        origin = _origin(base)
        headers = {"accept": "application/json, application/x-magnetar-entries"}
        if body is not None:
            headers["content-type"] = "application/json"
        for attempt in (1, 2):
            connection = self._connection(origin)
            try:
                connection.request(method, target, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                connection.close()
                self._connections.pop(origin, None)
                if attempt == 2:
                    raise BrokerUnreachableError(f"broker {base} closed the connection: {exc}") from None
                continue
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                self._connections.pop(origin, None)
                raise BrokerUnreachableError(f"cannot reach the broker at {base}: {exc}") from None
            if response.getheader("connection", "").lower() == "close":
                connection.close()
                self._connections.pop(origin, None)
            return response.status, response.getheader("location", ""), data
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        topic: TopicName | None = None,
    ) -> Response:
        """One call, following 307s; ``topic`` lets the client remember (and use) the topic's owner."""
        key = str(topic) if topic is not None else None
        with self._lock:
            base = self._owners.get(key, self.service_url) if key else self.service_url
            target = path + ("?" + urlencode(query) if query else "")
            payload = None if body is None else json.dumps(body).encode()
            for _ in range(REDIRECTS_MAX + 1):
                try:
                    status, location, data = self._exchange(base, method, target, payload)
                except BrokerUnreachableError:
                    if key is None or base == self.service_url:
                        raise
                    self._owners.pop(key, None)  # the remembered owner is gone: ask the service URL again
                    base, target = self.service_url, path + ("?" + urlencode(query) if query else "")
                    status, location, data = self._exchange(base, method, target, payload)
                if status != 307:
                    if key is not None and base != self.service_url:
                        self._owners[key] = base
                    return Response(status, data)
                if not location:
                    raise BrokerRequestError(f"{base}{path}: 307 without a Location", 307)
                parts = urlsplit(location)
                base = f"{parts.scheme}://{parts.netloc}" if parts.netloc else base
                target = parts.path + ("?" + parts.query if parts.query else "")
            raise BrokerRequestError(f"{self.service_url}{path}: more than {REDIRECTS_MAX} redirects", 307)

    # -- calls ------------------------------------------------------------------------------------------

    def _ok(self, response: Response, what: str, topic: TopicName | None = None) -> Response:
        if response.status < 300:
            return response
        if response.status == 404 and topic is not None:
            raise TopicNotFoundError(f"topic {topic} does not exist ({what}: {response.reason()})")
        raise BrokerRequestError(
            f"{what} failed with HTTP {response.status}: {response.reason()}", response.status
        )

    def partitions(self, topic: TopicName) -> int:
        """Partitions of a partitioned topic; 0 for a non-partitioned (or unknown) one."""
        response = self.request("GET", topic_path(topic) + "/partitions")
        return int(self._ok(response, f"partitions of {topic}").json()["partitions"])

    def internal_stats(self, topic: TopicName) -> dict[str, Any]:
        response = self.request("GET", topic_path(topic) + "/internalStats", topic=topic)
        data = self._ok(response, f"internalStats of {topic}", topic).json()
        if not isinstance(data, dict):
            raise BrokerRequestError(f"internalStats of {topic}: not a JSON object", response.status)
        return data

    def list_topics(self, tenant: str, namespace: str) -> list[str]:
        path = f"/admin/v2/persistent/{quote(tenant)}/{quote(namespace)}"
        topics = self._ok(self.request("GET", path), f"topics of {tenant}/{namespace}").json()
        partitioned = self._ok(self.request("GET", path + "/partitioned"), f"topics of {tenant}/{namespace}")
        return sorted({*topics, *partitioned.json()})

    def create_subscription(self, topic: TopicName, subscription: str, after: tuple[int, int] | None) -> bool:
        """Create ``subscription`` with everything up to ``after`` consumed (None: at the earliest entry).
        False when it already exists."""
        body: Any = SUBSCRIPTION_EARLIEST
        if after is not None:
            body = {"ledgerId": after[0], "entryId": after[1], "isExcluded": True}
        path = f"{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
        response = self.request("PUT", path, body=body, topic=topic)
        if response.status == 409:
            return False
        self._ok(response, f"creating subscription {subscription!r} on {topic}", topic)
        return True

    def reset_cursor(self, topic: TopicName, subscription: str, after: tuple[int, int]) -> bool:
        """Move ``subscription`` so that everything up to ``after`` counts as consumed (False: it is gone)."""
        body = {"ledgerId": after[0], "entryId": after[1], "isExcluded": True}
        path = f"{topic_path(topic)}/subscription/{quote(subscription, safe='')}/resetcursor"
        response = self.request("POST", path, body=body, topic=topic)
        if response.status in (404, 412):
            return False
        self._ok(response, f"moving subscription {subscription!r} on {topic}")
        return True

    def delete_subscription(self, topic: TopicName, subscription: str) -> None:
        path = f"{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
        response = self.request("DELETE", path, query={"force": "true"}, topic=topic)
        if response.status != 404:
            self._ok(response, f"deleting subscription {subscription!r} on {topic}")

    def read_range(
        self, topic: TopicName, first: tuple[int, int], last: tuple[int, int], max_entries: int
    ) -> bytes:
        """The entries ``first..last`` as entry frames (version 3 of :mod:`magnetar.admin.range_frames`)."""
        query = {
            "from": f"{first[0]}:{first[1]}",
            "to": f"{last[0]}:{last[1]}",
            "maxEntries": str(max_entries),
            "frameVersion": "3",
        }
        response = self.request("GET", topic_path(topic) + "/entries", query=query, topic=topic)
        return self._ok(response, f"reading entries of {topic}", topic).body


_shared: dict[tuple[str, float], AdminClient] = {}
_shared_lock = threading.Lock()


def close_shared_clients() -> None:
    """Close every shared client's connections (a worker process's exit does the same)."""
    with _shared_lock:
        for client in _shared.values():
            client.close()
        _shared.clear()


def shared_client(service_url: str, timeout_s: float) -> AdminClient:
    """The process's client for ``service_url`` (created on first use; its connections are reused)."""
    key = (service_url, timeout_s)
    with _shared_lock:
        client = _shared.get(key)
        if client is None:
            client = _shared[key] = AdminClient(service_url, timeout_s)
        return client
