"""Shared pytest configuration and fixtures.

Fixtures that start processes stop them by pid in their teardown. Keep each area's fixtures in its own
section (or in a module under tests/fixtures imported here) so parallel work does not collide.
"""

from __future__ import annotations

# --- metadata store / ZooKeeper fixtures ---------------------------------------------------------------
from fixtures.zookeeper import private_zookeeper, zookeeper_server, zookeeper_url  # noqa: F401

# --- bookie storage fixtures ----------------------------------------------------------------------------

# --- bookie server / protocol fixtures ------------------------------------------------------------------

# --- replication client / simulation options ------------------------------------------------------------
