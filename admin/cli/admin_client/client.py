"""The HTTP side of ``magnetar admin``: a small synchronous client of the admin REST API.

Requests go to ``--admin-url`` (env ``MAGNETAR_ADMIN_URL``, default ``http://127.0.0.1:8080``); 307 redirects
to the owning broker are followed with the same method, body and headers (the Location carries
``authoritative=true``), at most ``REDIRECTS_MAX`` times so a redirect loop (Pulsar issue #13946) ends with an
error. The client follows them itself because httpx drops the ``Authorization`` header on a redirect to
another host or port - and the owning broker needs the token as much as the first one. A non-2xx answer
raises :class:`AdminApiError` with the server's ``reason``.

With a token (``--auth-token``, as Pulsar's ``authParams=token:...``) every request carries
``Authorization: Bearer <token>``; ``--tls-trust-certs-file`` verifies an ``https://`` admin URL against
those CA certificates (Pulsar's ``tlsTrustCertsFilePath``) instead of the system's.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
REDIRECTS_MAX = 5
TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class RawAnswer:
    content_type: str
    headers: list[tuple[str, str]]
    body: bytes


class AdminApiError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("reason"), str):
        return str(body["reason"])
    return json.dumps(body)


class AdminClient:
    def __init__(
        self,
        base_url: str = DEFAULT_ADMIN_URL,
        *,
        timeout_s: float = TIMEOUT_S,
        token: str | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            follow_redirects=False,
            timeout=timeout_s,
            headers=headers,
            verify=verify,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """Send one request; returns the decoded JSON answer (text for non-JSON, None for 204)."""
        response = self._exchange(method, path, body=body, params=params)
        if response.status_code == 204 or not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def get_raw(self, path: str, **params: Any) -> RawAnswer:
        """A GET whose answer is kept as it came: content type, headers (names as sent) and body bytes."""
        response = self._exchange("GET", path, params=params)
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in response.headers.raw]
        return RawAnswer(response.headers.get("content-type", ""), headers, response.content)

    def _exchange(
        self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None
    ) -> httpx.Response:
        """One request, redirects followed; :class:`AdminApiError` unless the answer is a 2xx."""
        content = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if content is not None else {}
        clean = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        url: str = path
        query: dict[str, str] | None = clean
        for _ in range(REDIRECTS_MAX + 1):
            try:
                response = self._http.request(method, url, content=content, headers=headers, params=query)
            except httpx.HTTPError as exc:
                raise AdminApiError(0, f"cannot reach {self._http.base_url}: {exc}") from None
            location = response.headers.get("location")
            if response.status_code not in (307, 308) or not location:
                break
            url, query = location, None  # the Location carries the query (with authoritative=true)
        else:
            raise AdminApiError(307, f"more than {REDIRECTS_MAX} redirects")
        if response.status_code >= 300:
            raise AdminApiError(response.status_code, _reason(response))
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def put(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.request("PUT", path, body=body, params=params)

    def post(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.request("POST", path, body=body, params=params)

    def delete(self, path: str, **params: Any) -> Any:
        return self.request("DELETE", path, params=params)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
