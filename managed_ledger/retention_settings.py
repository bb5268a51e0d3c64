"""Retention, expiry and backlog-quota settings of a broker's managed ledgers (Pulsar's broker options, unit
last), declared once: :class:`~magnetar.broker.settings.BrokerSettings` inherits them (each is a flag name, a
``MAGNETAR_<NAME>`` variable and a config key of the broker), and the retention service
(:mod:`magnetar.gc.retention`) takes the broker's settings as they are. They live here, below both, because
the broker may not import ``gc`` and ``gc`` may not import the broker."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RetentionDefaults(BaseModel):
    """The retention and expiry of a namespace whose policies set none (Pulsar's ``defaultRetention*``,
    ``ttlDurationDefaultInSeconds``): what the retention service applies and the admin API reports."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_retention_time_min: int = Field(default=0, ge=-1)
    default_retention_size_mb: int = Field(default=0, ge=-1)
    ttl_duration_default_s: int = Field(default=0, ge=0)


class RetentionSettings(RetentionDefaults):
    model_config = ConfigDict(frozen=True, extra="forbid")

    retention_check_interval_s: float = Field(default=120, gt=0)
    """Every owned topic is trimmed this often (Pulsar's ``retentionCheckIntervalInSeconds``)."""
    trim_queue_max: int = Field(default=10_000, ge=1)
    """Topics waiting for an event-driven trim (one entry each); beyond it the periodic pass catches up."""
    message_expiry_check_interval_s: float = Field(default=300, gt=0)
    """How often message TTL is applied (Pulsar's ``messageExpiryCheckIntervalInMinutes`` = 5)."""
    expiry_search_reads_max: int = Field(default=64, ge=1)
    """Entries read to find the newest expired entry of one cursor (a binary search needs ~log2(backlog))."""
    backlog_quota_check_interval_s: float = Field(default=60, gt=0)
    """Pulsar's ``backlogQuotaCheckIntervalInSeconds``."""
    backlog_eviction_target_fraction: float = Field(default=0.9, gt=0, le=1)
    """Eviction trims a cursor's backlog down to this fraction of the quota (Pulsar's reduction factor)."""
    delete_inactive_topics_enabled: bool = False
    """Off by default - unlike Pulsar's ``brokerDeleteInactiveTopicsEnabled=true``, which deletes idle topics
    without subscriptions after a minute and surprises users (docs/upstream.md, Pulsar §8)."""
    delete_inactive_topics_frequency_s: float = Field(default=60, gt=0)
