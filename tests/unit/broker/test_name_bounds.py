"""Every name the broker accepts makes metadata paths the store accepts (4 KiB, no ``.``/``..`` segment).

The audit found tenant names ``..`` or 7,000 characters answered 500: they passed the name checks and the
metadata store refused the path they made. The checks now refuse them (with a reason), and this property
holds for any tenant, namespace, topic and subscription name: accepted means storable.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from magnetar.bookkeeper.metadata.api import validate_path
from magnetar.broker.policies.store import PARTITIONED, POLICIES, TOPIC_POLICIES
from magnetar.broker.wire.errors import InvalidSubscriptionNameError, InvalidTopicNameError
from magnetar.broker.wire.topic_name import (
    LOCAL_NAME_CHARS_MAX,
    NAMED_ENTITY_CHARS_MAX,
    SUBSCRIPTION_NAME_CHARS_MAX,
    SUBSCRIPTION_NAME_ENCODED_CHARS_MAX,
    NamespaceName,
    TopicName,
    check_named_entity,
    check_subscription_name,
)
from magnetar.managed_ledger.meta_store import cursor_path, ledger_path

ENTITY = st.from_regex(r"[-=:.A-Za-z0-9_]{1,300}", fullmatch=True)
LONGEST_ENTITY = "n" * NAMED_ENTITY_CHARS_MAX


@pytest.mark.parametrize("name", [".", "..", "a" * (NAMED_ENTITY_CHARS_MAX + 1), "a" * 7000])
def test_relative_and_overlong_entity_names_are_refused(name: str) -> None:
    for kind in ("tenant", "namespace", "cluster"):
        with pytest.raises(InvalidTopicNameError) as caught:
            check_named_entity(kind, name)
        assert len(str(caught.value)) < 200  # the reason does not echo a 7,000-character name
    with pytest.raises(InvalidTopicNameError):
        NamespaceName("public", name)
    with pytest.raises(InvalidTopicNameError):
        TopicName.of(name, "default", "t")


def test_names_at_the_bounds_are_accepted() -> None:
    check_named_entity("tenant", LONGEST_ENTITY)
    check_named_entity("tenant", "...")  # only "." and ".." are relative
    topic = TopicName.of(LONGEST_ENTITY, LONGEST_ENTITY, "%" * (LOCAL_NAME_CHARS_MAX // 3))
    longest_subscription = "%" * (SUBSCRIPTION_NAME_ENCODED_CHARS_MAX // 3)
    check_subscription_name(longest_subscription)
    validate_path(cursor_path(topic.managed_ledger_name, longest_subscription))


@pytest.mark.parametrize("local", [".", "..", "é" * 1024, "%" * (LOCAL_NAME_CHARS_MAX + 1), "%" * 700])
def test_relative_and_overlong_local_names_are_refused(local: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.of("public", "default", local)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        (".", "is a relative path segment"),
        ("..", "is a relative path segment"),
        ("s" * (SUBSCRIPTION_NAME_CHARS_MAX + 1), f"longer than {SUBSCRIPTION_NAME_CHARS_MAX} characters"),
        ("é" * 1024, f"longer than {SUBSCRIPTION_NAME_ENCODED_CHARS_MAX} characters once percent-encoded"),
    ],
)
def test_bad_subscription_names_are_refused_with_a_reason(name: str, why: str) -> None:
    with pytest.raises(InvalidSubscriptionNameError, match=why):
        check_subscription_name(name)


def _paths(topic: TopicName) -> list[str]:
    namespace = f"{topic.tenant}/{topic.namespace}"
    return [
        f"{POLICIES}/{namespace}",
        ledger_path(topic.managed_ledger_name),
        f"{PARTITIONED}/{namespace}/persistent/{topic.encoded_local_name}",
        f"{TOPIC_POLICIES}/{namespace}/{topic.encoded_local_name}",
    ]


@given(tenant=ENTITY, namespace=ENTITY, local=st.text(min_size=1, max_size=1100), subscription=st.text())
@example(LONGEST_ENTITY, LONGEST_ENTITY, "%" * (LOCAL_NAME_CHARS_MAX // 3), "%" * 512)
@example(LONGEST_ENTITY, LONGEST_ENTITY, "t" * (LOCAL_NAME_CHARS_MAX - 21) + "-partition-2147483647", "..")
def test_every_accepted_name_makes_storable_paths(
    tenant: str, namespace: str, local: str, subscription: str
) -> None:
    try:
        topic = TopicName.of(tenant, namespace, local)
    except InvalidTopicNameError:
        return
    for path in _paths(topic):
        validate_path(path)
    try:
        check_subscription_name(subscription)
    except InvalidSubscriptionNameError:
        return
    validate_path(cursor_path(topic.managed_ledger_name, subscription))
