"""Tenants, namespaces, clusters and their policies as stored in the metadata store (:mod:`.store`), and the
broker's side of backlog quotas (:mod:`.publish_gate`: what a producer asks before publishing; the retention
service decides). Imported by the security, the service and the admin REST API; imports no other part of the
broker but the wire formats."""

from magnetar.broker.policies.publish_gate import ADMISSION_HOLD, ADMISSION_OK, ADMISSION_REJECT, PublishGate
from magnetar.broker.policies.store import (
    AlreadyExists,
    BacklogQuota,
    BundlesData,
    ClusterData,
    NotFound,
    PartitionedTopicMetadata,
    Policies,
    PolicyError,
    PolicyStore,
    PreconditionFailed,
    RetentionPolicies,
    TenantInfo,
    TopicPolicies,
    ensure,
    initialize_cluster_metadata,
)

__all__ = [
    "ADMISSION_HOLD",
    "ADMISSION_OK",
    "ADMISSION_REJECT",
    "AlreadyExists",
    "BacklogQuota",
    "BundlesData",
    "ClusterData",
    "NotFound",
    "PartitionedTopicMetadata",
    "Policies",
    "PolicyError",
    "PolicyStore",
    "PreconditionFailed",
    "PublishGate",
    "RetentionPolicies",
    "TenantInfo",
    "TopicPolicies",
    "ensure",
    "initialize_cluster_metadata",
]
