"""Which subscription names a topic can have.

Pulsar puts no bound on a subscription's name. Magnetar stores a durable subscription's cursor under a
metadata path made of the topic's managed-ledger name and the subscription's name (percent-encoded), and a
metadata path holds at most 4 KiB with no ``.`` or ``..`` segment. So a subscription name is refused - before
anything is created - when it is empty, longer than :data:`SUBSCRIPTION_NAME_CHARS_MAX` characters, ``.`` or
``..``, or too long for its topic: the cursor's path would not fit (the reason gives the sizes).
"""

from __future__ import annotations

from magnetar.bookkeeper.metadata.api import METADATA_PATH_BYTES_MAX
from magnetar.broker.errors import InvalidSubscriptionNameError
from magnetar.broker.topic_name import RELATIVE_SEGMENTS, TopicName
from magnetar.managed_ledger.meta_store import cursor_path

SUBSCRIPTION_NAME_CHARS_MAX = 1024


def check_subscription_name(topic: TopicName, name: str) -> None:
    """Raise :class:`InvalidSubscriptionNameError` unless ``topic`` can have a subscription ``name``."""
    if not name:
        raise InvalidSubscriptionNameError("Invalid subscription name: empty")
    if len(name) > SUBSCRIPTION_NAME_CHARS_MAX:
        raise InvalidSubscriptionNameError(
            f"Invalid subscription name: longer than {SUBSCRIPTION_NAME_CHARS_MAX} characters"
        )
    if name in RELATIVE_SEGMENTS:
        raise InvalidSubscriptionNameError(f"Invalid subscription name: {name!r} is not a name")
    path_bytes = len(cursor_path(topic.managed_ledger_name, name).encode("utf-8", "surrogatepass"))
    if path_bytes > METADATA_PATH_BYTES_MAX:
        raise InvalidSubscriptionNameError(
            f"Invalid subscription name: too long for topic {topic.full_name} (its cursor's metadata path "
            f"would take {path_bytes} bytes, at most {METADATA_PATH_BYTES_MAX})"
        )
