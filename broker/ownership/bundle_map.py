"""Which bundle holds a topic: each namespace's bundle boundaries, read from its policies and kept, and a
split written into them (Pulsar's ``NamespaceBundleFactory``).

A namespace's boundaries are its policies' ``bundles.boundaries`` (hex), or - for a namespace never split -
``numBundles`` equal ranges (``default_number_of_namespace_bundles`` when unset). They are read once and kept
until :meth:`BundleMap.forget` (a lookup that finds no owner reads them again: the namespace may have been
split by another broker). A split writes the new middle boundary with a compare-and-set on the policies, so
two splits of one namespace never lose each other's boundary."""

from __future__ import annotations

from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.broker.core import ServiceUnitNotReadyError, TopicNotFoundError
from magnetar.broker.ownership.namespace_bundle import (
    NamespaceBundle,
    bundle_boundaries,
    bundle_for_hash,
    bundles_of,
    split_in_half,
    topic_hash,
)
from magnetar.broker.policies import Policies, PolicyError, PolicyStore
from magnetar.broker.wire import TopicName

Bundle = tuple[str, str]
"""A namespace and the range name of one of its bundles (``0xLOW_0xHIGH``)."""


class BundleMap:
    def __init__(self, policies: PolicyStore, default_bundles: int) -> None:
        self._policies = policies
        self._default_bundles = default_bundles
        self._boundaries: dict[str, list[int]] = {}

    def forget(self, namespace: str) -> None:
        """Read the namespace's boundaries again next time."""
        self._boundaries.pop(namespace, None)

    async def bundle_of(self, topic: TopicName) -> Bundle:
        namespace = str(topic.namespace_name)
        boundaries = self._boundaries.get(namespace)
        if boundaries is None:
            boundaries = self.boundaries_of(await self.namespace_policies(namespace))
            self._boundaries[namespace] = boundaries
        return namespace, bundle_for_hash(topic_hash(topic), boundaries).range_name

    async def namespace_policies(self, namespace: str) -> Policies:
        """The namespace's policies; :class:`TopicNotFoundError` for a missing namespace, and
        :class:`ServiceUnitNotReadyError` when they cannot be read."""
        try:
            policies = await self._policies.get_namespace(namespace)
        except (PolicyError, MetadataStoreError) as exc:
            raise ServiceUnitNotReadyError(f"reading the policies of {namespace} failed: {exc}") from exc
        if policies is None:
            raise TopicNotFoundError(f"Namespace {namespace} does not exist")
        return policies

    def boundaries_of(self, policies: Policies) -> list[int]:
        return [int(b, 16) for b in policies.bundles.boundaries] or bundle_boundaries(
            policies.bundles.numBundles or self._default_bundles
        )

    async def bundle_count(self, namespace: str) -> int:
        return len(self.boundaries_of(await self.namespace_policies(namespace))) - 1

    async def bundle_names(self, namespace: str) -> list[str]:
        """The namespace's bundles as they are now (``0xLOW_0xHIGH``), read from its policies."""
        bounds = self.boundaries_of(await self.namespace_policies(namespace))
        return [b.range_name for b in bundles_of(bounds)]

    async def split(self, namespace: str, bundle: str) -> tuple[str, str]:
        """Write the middle of ``bundle`` into the namespace's boundaries (Pulsar's
        ``range_equally_divide``); the halves' names."""
        old = NamespaceBundle.parse(bundle)

        def insert(policies: Policies) -> Policies:
            try:
                bounds = split_in_half(old, self.boundaries_of(policies))
            except ValueError as exc:
                raise ServiceUnitNotReadyError(
                    f"bundle {namespace}/{bundle} cannot be split: {exc}"
                ) from None
            data = policies.bundles.model_copy(
                update={"boundaries": [f"0x{b:08x}" for b in bounds], "numBundles": len(bounds) - 1}
            )
            return policies.model_copy(update={"bundles": data})

        try:
            await self._policies.update_namespace(namespace, insert)
        except (PolicyError, MetadataStoreError) as exc:
            raise ServiceUnitNotReadyError(f"splitting {namespace}/{bundle} failed: {exc}") from exc
        self.forget(namespace)
        middle = old.lower + (old.upper - old.lower) // 2
        return NamespaceBundle(old.lower, middle).range_name, NamespaceBundle(middle, old.upper).range_name
