"""Topic schemas (Pulsar's schema registry): the decisions without I/O (:mod:`.core`, with the Avro record
check of :mod:`.avro`) and their storage in the metadata store (:mod:`.registry`). The binary protocol's
door and the admin API's schema routes use them; ``docs/schemas.md`` describes what is served."""

from magnetar.broker.schemas.core import (
    Schema,
    SchemaError,
    SchemaType,
    Strategy,
    VersionEntry,
    type_named,
    type_of,
)
from magnetar.broker.schemas.registry import SchemaLimits, SchemaRegistry, SchemaStoreError, StoredSchema
from magnetar.broker.schemas.settings import SchemaSettings

__all__ = [
    "Schema",
    "SchemaError",
    "SchemaLimits",
    "SchemaRegistry",
    "SchemaSettings",
    "SchemaStoreError",
    "SchemaType",
    "StoredSchema",
    "Strategy",
    "VersionEntry",
    "type_named",
    "type_of",
]
