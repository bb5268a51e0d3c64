"""Shared helpers for the "a limit on everything" convention."""

from __future__ import annotations


class LimitExceeded(Exception):
    """A named, configured limit was hit; the message names the setting and its value."""

    def __init__(self, setting: str, limit: int | float, detail: str = "") -> None:
        self.setting = setting
        self.limit = limit
        suffix = f": {detail}" if detail else ""
        super().__init__(f"limit {setting}={limit} exceeded{suffix}")
