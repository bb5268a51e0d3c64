"""Shared pytest configuration and fixtures.

Fixtures that start processes stop them by pid in their teardown. Each area keeps its shared fixtures in a
module under ``tests/fixtures/`` and lists it in ``pytest_plugins`` below (``tests/`` is on the import path).

* ``fixtures.zookeeper`` - a real ZooKeeper: ``zookeeper_server`` (per session), ``zookeeper_url`` (a fresh
  chroot per test), ``private_zookeeper`` (a test's own server to stop or pause)
* ``fixtures.processes`` - real ``magnetar`` processes stopped by pid: ``magnetar_processes``
* ``fixtures.broker`` - brokers on in-process bookies in a thread of their own: ``cluster``, ``broker``
  (plus WebSocket client helpers)
* ``fixtures.client`` - in-process bookies: ``client_metadata``, ``in_process_bookies``,
  ``bookkeeper_client``
* ``fixtures.admin`` - the admin REST API on a real server: ``admin_server``, ``admin_client``,
  ``run_admin_server``
* ``fixtures.spark`` - the Spark source's broker and messages: ``spark_broker``, ``produce`` (the Spark
  session itself is in ``tests/spark/conftest.py``)
* ``fixtures.bookie_server`` - helpers for bookie server tests (imported by the tests that use them)
* ``fixtures.disk`` - small file systems (a tmpfs when the test may mount one), adds straight to a bookie's
  request logic, waits for read-only registration (imported by the tests that use them)
* ``fixtures.auth`` - token keys (``token_keys``), a test CA with server/client certificates (``tls_files``),
  ``FakeClock``
* ``fixtures.dev_cluster`` - real clusters of processes (``open_test_cluster``, the ``magnetar dev-cluster``
  command), imported by the tests that use them; ``fixtures.tcp_proxy`` - the fault-injecting proxy
* the Hypothesis profile ``magnetar`` (here): no per-example deadline
* ``--long`` (here): the long variants of the end-to-end and integration tests (``long_scale(short, long)``
  picks a figure: the short one in the default suite, the long one with ``--long``); the failure suite's
  ``--chaos-long`` option lives in ``tests/chaos/conftest.py``
* the simulation's ``--sim-seed`` / ``--sim-seeds`` options live in ``tests/sim/conftest.py``
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import settings

# Every process a test starts takes a free port for Pulsar's binary protocol unless it names one, as tests
# do for every other port: the shipped default (6650) would make processes of tests that run side by side,
# or one after the other while a port is in TIME_WAIT, refuse to start. The dev cluster names its brokers'
# ports itself (its test connects to the ports it names).
os.environ.setdefault("MAGNETAR_BROKER_SERVICE_PORT", "0")

# Hypothesis's per-example deadline (200 ms) is a timing assertion: on a loaded machine, or next to a second
# pytest-xdist worker, a slow first run of an example fails the test as flaky. Tests that want a deadline
# set one with @settings.
settings.register_profile("magnetar", deadline=None)
settings.load_profile("magnetar")

pytest_plugins = [
    "fixtures.admin",
    "fixtures.auth",
    "fixtures.client",
    "fixtures.processes",
    "fixtures.zookeeper",
    "fixtures.broker",
    "fixtures.spark",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="run the long variants of the end-to-end and integration tests (more messages, longer runs)",
    )


@pytest.fixture
def long_scale(request: pytest.FixtureRequest) -> Callable[[int, int], int]:
    """``long_scale(short, long)``: the short figure in the default suite, the long one with ``--long``."""
    long_run = bool(request.config.getoption("--long"))

    def pick(short: int, long: int) -> int:
        return long if long_run else short

    return pick
