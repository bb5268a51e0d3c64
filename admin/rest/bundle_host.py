"""What the bundle and load-manager routes (:mod:`.load_balance`) need from the broker."""

from __future__ import annotations

from typing import Any, Protocol


class BundleHost(Protocol):
    """The broker's side of the bundle routes."""

    async def owner_url(self, namespace: str, bundle: str) -> str | None:
        """The owner's HTTP URL; "" when this broker owns it; None when nobody does."""
        ...

    async def unload(self, namespace: str, bundle: str) -> None: ...

    async def split(self, namespace: str, bundle: str, unload: bool) -> tuple[str, str]: ...

    async def unload_namespace(self, namespace: str) -> int: ...

    async def leader(self) -> dict[str, str] | None: ...

    def load_report(self) -> dict[str, Any]: ...
