"""Settings of garbage collection: the broker-side retention service's settings are declared with the
managed ledger's (:mod:`magnetar.managed_ledger.retention_settings`, which the broker's settings inherit)."""

from magnetar.managed_ledger.retention_settings import RetentionSettings

__all__ = ["RetentionSettings"]
