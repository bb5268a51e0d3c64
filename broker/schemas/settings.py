"""The broker's schema settings (``docs/schemas.md``), declared once: the broker's settings inherit them, and
the admin API of a process without a broker uses their defaults."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from magnetar.bookkeeper.metadata import METADATA_VALUE_BYTES_MAX
from magnetar.broker.schemas.core import Strategy
from magnetar.broker.schemas.registry import SchemaLimits


class SchemaSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_compatibility_strategy: Literal[
        "ALWAYS_INCOMPATIBLE",
        "ALWAYS_COMPATIBLE",
        "BACKWARD",
        "FORWARD",
        "FULL",
        "BACKWARD_TRANSITIVE",
        "FORWARD_TRANSITIVE",
        "FULL_TRANSITIVE",
    ] = "FULL"
    """Pulsar's ``schemaCompatibilityStrategy``: whether a producer's new schema may become a topic's next
    version (FULL: records written with either can be read with the other)."""
    schema_data_bytes_max: Annotated[int, Field(ge=1, le=METADATA_VALUE_BYTES_MAX)] = 1_000_000
    """Bytes of one schema version's data (the Avro/JSON definition); a larger one is refused."""
    schema_versions_max: Annotated[int, Field(ge=1, le=1000)] = 100
    """Versions (deletion marks included) one topic's schema history may hold; one more is refused."""

    def schema_limits(self) -> SchemaLimits:
        return SchemaLimits(
            self.schema_data_bytes_max,
            self.schema_versions_max,
            Strategy(self.schema_compatibility_strategy),
        )
