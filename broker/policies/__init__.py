"""Tenants, namespaces, clusters and their policies as stored in the metadata store (:mod:`.store`), and the
broker's side of backlog quotas (:mod:`.publish_gate`: what a producer asks before publishing; the retention
service decides). Imported by the security, the service and the admin REST API; imports no other part of the
broker but the wire formats."""
