"""Shared pytest configuration and fixtures.

Fixtures that start processes stop them by pid in their teardown. Keep each area's fixtures in its own
section (or in a module under tests/fixtures imported here) so parallel work does not collide.
"""

from __future__ import annotations

# --- metadata store / ZooKeeper fixtures ---------------------------------------------------------------

# --- bookie storage fixtures ----------------------------------------------------------------------------

# --- bookie server / protocol fixtures ------------------------------------------------------------------

# --- replication client / simulation options ------------------------------------------------------------
# In-process bookies (fixtures client_metadata, in_process_bookies, bookkeeper_client, defined in
# tests/fixtures/client.py); the simulation's --sim-seed / --sim-seeds options live in tests/sim/conftest.py.
pytest_plugins = ["fixtures.client"]
