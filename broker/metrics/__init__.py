"""The broker's Prometheus metrics under Pulsar's names (:mod:`.broker_metrics`) and their text exposition,
rendered a little at a time so a scrape never holds the event loop (:mod:`.exposition`). Other parts (the
owner proxy, the composition root's storage figures) add their families as metrics sources."""

from magnetar.broker.metrics.broker_metrics import TOPIC_LABELS, BrokerMetrics, MetadataFigures, broker_wide
from magnetar.broker.metrics.exposition import CONTENT_TYPE, Family, FamilyRows, Kind, Row

__all__ = [
    "CONTENT_TYPE",
    "TOPIC_LABELS",
    "BrokerMetrics",
    "Family",
    "FamilyRows",
    "Kind",
    "MetadataFigures",
    "Row",
    "broker_wide",
]
