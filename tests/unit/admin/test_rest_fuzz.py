"""Property-based fuzzing of the admin API from its own OpenAPI document (schemathesis).

Every operation of ``GET /admin/v2/openapi.json`` gets generated requests - valid ones and deliberately
invalid ones (wrong types, out-of-range numbers, bad names, unknown parameters) - against a real server, and
every answer must conform: no 5xx, a documented status, a ``{"reason"}`` body on errors, a body matching the
response schema on success. The server runs in a thread (schemathesis drives a blocking client); examples are
bounded so the whole run stays well under a minute.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest
import schemathesis
import trio
from fixtures.admin import initialized_store, run_admin_server
from hypothesis import HealthCheck, settings

from magnetar.admin.rest import AdminContext, register_admin_routes
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.bookkeeper.runtime.http import Router

EXAMPLES_PER_OPERATION = 25

DOCUMENT = register_admin_routes(Router(), AdminContext(MemoryMetadataStore()))
# Pulsar answers an invalid name with 412 (reference/pulsar.md §2.1): a valid rejection of invalid input here.
REJECTIONS = ["400", "404", "405", "406", "409", "412", "413", "422"]
# A schema-valid request may still fail a precondition of the current state (a missing tenant: 404, a
# cluster that does not exist: 412, a name taken: 409), but never with 400: the schema and the server's
# validation must agree.
STATE_REFUSALS = ["2XX", "404", "405", "406", "409", "412", "422"]
CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {
            "negative_data_rejection": {"expected-statuses": REJECTIONS},
            "positive_data_acceptance": {"expected-statuses": STATE_REFUSALS},
        }
    }
)
schema = schemathesis.openapi.from_dict(DOCUMENT, config=CONFIG)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    ready: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.Event]] = queue.Queue()

    async def serve() -> None:
        store = await initialized_store()
        stop = trio.Event()
        async with run_admin_server(store) as server:
            ready.put((server.base_url, trio.lowlevel.current_trio_token(), stop))
            await stop.wait()
        await store.aclose()

    thread = threading.Thread(target=trio.run, args=(serve,), name="admin-fuzz-server")
    thread.start()
    url, token, stop = ready.get(timeout=30)
    try:
        yield url
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(timeout=30)
        assert not thread.is_alive()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
def test_admin_api_conforms_to_its_schema(case: schemathesis.Case, base_url: str) -> None:
    response = case.call(base_url=base_url, timeout=10)
    case.validate_response(response)
