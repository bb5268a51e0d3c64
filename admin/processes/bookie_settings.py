"""The settings of a bookie process, composed at the composition root: the bookie server's and its garbage
collector's (the server never imports ``magnetar.gc``; gc reaches the bookie only through the storage
engine's seam).
"""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from magnetar.bookkeeper.bookie import BookieServerSettings
from magnetar.gc import GcSettings


class BookieSettings(BookieServerSettings):
    """The settings of a bookie process (``magnetar bookie``, each bookie of ``magnetar standalone``): the
    bookie server's (:class:`~magnetar.bookkeeper.bookie.settings.BookieServerSettings`) and its garbage
    collector's. The server never reads ``gc``; the composition root hands it to the collector
    (:func:`.gc_wiring.attach_garbage_collector`)."""

    model_config = SettingsConfigDict(
        env_prefix="MAGNETAR_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    gc: GcSettings = GcSettings()
    """Garbage collection and entry-log compaction (disk storage), e.g. ``MAGNETAR_GC__GC_WAIT_TIME_S=60``."""
