"""The HTTP side of ``magnetar admin``: a small synchronous client of the admin REST API.

Requests go to ``--admin-url`` (env ``MAGNETAR_ADMIN_URL``, default ``http://127.0.0.1:8080``); 307 redirects
to the owning broker are followed (httpx keeps the method and body; the Location carries
``authoritative=true``), at most ``REDIRECTS_MAX`` times so a redirect loop (Pulsar issue #13946) ends with an
error. A non-2xx answer raises :class:`AdminApiError` with the server's ``reason``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
REDIRECTS_MAX = 5
TIMEOUT_S = 30.0


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
    def __init__(self, base_url: str = DEFAULT_ADMIN_URL, *, timeout_s: float = TIMEOUT_S) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            follow_redirects=True,
            max_redirects=REDIRECTS_MAX,
            timeout=timeout_s,
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
        content = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if content is not None else {}
        clean = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path, content=content, headers=headers, params=clean)
        except httpx.TooManyRedirects:
            raise AdminApiError(307, f"more than {REDIRECTS_MAX} redirects") from None
        except httpx.HTTPError as exc:
            raise AdminApiError(0, f"cannot reach {self._http.base_url}: {exc}") from None
        if response.status_code >= 300:
            raise AdminApiError(response.status_code, _reason(response))
        if response.status_code == 204 or not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

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
