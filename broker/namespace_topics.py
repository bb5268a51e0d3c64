"""The topics of one namespace, as the binary protocol's GET_TOPICS_OF_NAMESPACE lists them for pattern
consumers (protocol-neutral: full names, sorted).

Persistent topics are the namespace's managed ledgers plus every partition of its partitioned topics (what
the admin API lists); non-persistent topics are those loaded on this broker (they exist only while loaded).
At most :data:`TOPICS_LISTED_MAX` names: a namespace with more is refused (:class:`TooManyTopicsToListError`)
rather than listed in part, since a pattern consumer would silently miss the rest.
"""

from __future__ import annotations

from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.broker.core import ErrorKind, ServiceError
from magnetar.broker.non_persistent_service import NonPersistentTopics
from magnetar.broker.policies import PolicyStore
from magnetar.broker.wire import InvalidTopicNameError, NamespaceName, TopicName
from magnetar.managed_ledger.meta_store import ledger_path

TOPICS_LISTED_MAX = 100_000


class TooManyTopicsToListError(ServiceError):
    kind = ErrorKind.LIMIT_REACHED


async def namespace_topics(
    metadata: MetadataStore,
    policies: PolicyStore,
    loaded_non_persistent: NonPersistentTopics,
    namespace: NamespaceName,
    *,
    persistent: bool,
    non_persistent: bool,
) -> list[str]:
    names: set[str] = set()
    if persistent:
        prefix = f"{namespace}/persistent"
        for child in await metadata.get_children(ledger_path(prefix)):
            try:
                names.add(str(TopicName.from_managed_ledger_name(f"{prefix}/{child}")))
            except InvalidTopicNameError:
                continue  # not a topic of ours: never fail the listing for it
            if len(names) > TOPICS_LISTED_MAX:
                raise _too_many(namespace)
        for local in await policies.partitioned_topics(str(namespace)):
            try:
                base = TopicName.of(namespace.tenant, namespace.namespace, local)
            except InvalidTopicNameError:
                continue
            count = await policies.get_partitions(str(namespace), local)
            if len(names) + count > TOPICS_LISTED_MAX:
                raise _too_many(namespace)
            names.update(str(base.partition(i)) for i in range(count))
    if non_persistent:
        names.update(loaded_non_persistent.names_in(namespace))
        if len(names) > TOPICS_LISTED_MAX:
            raise _too_many(namespace)
    return sorted(names)


def _too_many(namespace: NamespaceName) -> TooManyTopicsToListError:
    return TooManyTopicsToListError(f"Namespace {namespace} has more than {TOPICS_LISTED_MAX} topics to list")
