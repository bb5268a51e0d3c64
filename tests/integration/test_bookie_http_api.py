"""The bookies' HTTP API on real processes: served by ``magnetar standalone`` on its own port (all bookies at
BookKeeper's paths, each under ``/bookies/{bookieId}``, their metrics with the broker's), and who may call it
with authentication on - on the standalone's port, on a ``magnetar bookie``'s own HTTP port and on a
``magnetar autorecovery``'s - for every
endpoint and each of no token, a token of an ordinary role and a superuser's token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fixtures.auth import TokenKeys
from fixtures.processes import MagnetarProcess, ProcessGroup
from fixtures.standalone_process import free_ports
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.processes, pytest.mark.slow]

OPERATOR_ENDPOINTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/api/v1/bookie/info", None),
    ("GET", "/api/v1/bookie/state", None),
    ("GET", "/api/v1/bookie/gc", None),
    ("PUT", "/api/v1/bookie/gc", {"forceMajor": True, "forceMinor": False}),
    ("GET", "/api/v1/bookie/gc_details", None),
    ("GET", "/api/v1/bookie/gc/suspend_compaction", None),
    ("PUT", "/api/v1/bookie/gc/suspend_compaction", {"suspendMajor": True, "suspendMinor": True}),
    ("PUT", "/api/v1/bookie/gc/resume_compaction", {"resumeMajor": True, "resumeMinor": True}),
    ("GET", "/api/v1/bookie/list_disk_file", None),
    ("GET", "/api/v1/bookie/entry_log_usage", None),
]
BAD_BODIES = [
    b"[" * 100_000,  # deeper than the JSON parser's recursion limit
    b'{"forceMajor": ' * 50_000,
    b"{not json",
    b"\xff\xfe",
    b"[1]",
    b'{"forceMajor": 3}',
    b'{"suspendMajor": {"a": [1]}}',
]


@pytest.fixture
def secret_key(tmp_path: Path, token_keys: TokenKeys) -> Path:
    key = tmp_path / "secret.key"
    key.write_bytes(token_keys.secret)
    return key


def tokens(token_keys: TokenKeys) -> dict[str, dict[str, str]]:
    """Headers of each caller: no token, an ordinary role's, a superuser's."""
    return {
        "none": {},
        "app": {"Authorization": f"Bearer {token_keys.token('app')}"},
        "admin": {"Authorization": f"Bearer {token_keys.token('admin')}"},
    }


def call(http: httpx.Client, method: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return http.request(method, path, json=body, headers=headers)


def assert_access_matrix(http: httpx.Client, prefixes: list[str], callers: dict[str, dict[str, str]]) -> None:
    """Every operator endpoint: 401 without a token, 403 for ``app``, 2xx for ``admin``; ``is_ready`` and
    ``heartbeat`` (the probes) open; ``/metrics`` (with ``authenticate_metrics_endpoint`` on) like an operator
    endpoint."""
    for prefix in prefixes:
        for method, path, body in OPERATOR_ENDPOINTS:
            answers = {who: call(http, method, prefix + path, body, h) for who, h in callers.items()}
            where = f"{method} {prefix}{path}"
            assert answers["none"].status_code == 401, where
            assert answers["none"].json()["reason"].startswith("Authentication required"), where
            assert answers["none"].headers["www-authenticate"].startswith("Bearer"), where
            assert answers["app"].status_code == 403, where
            assert "super-user" in answers["app"].json()["reason"], where
            assert answers["admin"].status_code == 200, (where, answers["admin"].text)
        for headers in callers.values():
            ready = http.get(f"{prefix}/api/v1/bookie/is_ready", headers=headers)
            assert ready.status_code == 200
            assert ready.json() == "OK"
            alive = http.get(f"{prefix}/heartbeat", headers=headers)
            assert (alive.status_code, alive.json()) == (200, "OK")
        metrics = {who: http.get(f"{prefix}/metrics", headers=h) for who, h in callers.items()}
        assert metrics["none"].status_code == 401
        assert metrics["app"].status_code == 403
        assert metrics["admin"].status_code == 200
        assert "bookkeeper_server_ADD_ENTRY_REQUEST_count" in metrics["admin"].text


AUTORECOVERY_ROUTES = [
    ("GET", "/api/v1/autorecovery/who_is_auditor"),
    ("GET", "/api/v1/autorecovery/list_under_replicated_ledger"),
    ("GET", "/api/v1/bookie/list_bookies"),
    ("GET", "/api/v1/ledger/list"),
    ("PUT", "/api/v1/autorecovery/trigger_audit"),
    ("PUT", "/api/v1/autorecovery/decommission"),
]


def assert_operators_only(
    http: httpx.Client, routes: list[tuple[str, str]], callers: dict[str, dict[str, str]]
) -> None:
    """Each route: 401 without a token, 403 for ``app``; a superuser lists the bookies."""
    for method, path in routes:
        assert http.request(method, path, headers=callers["none"]).status_code == 401, path
        assert http.request(method, path, headers=callers["app"]).status_code == 403, path
    assert http.get("/api/v1/bookie/list_bookies", headers=callers["admin"]).status_code == 200


def assert_bad_bodies_are_400(http: httpx.Client, prefix: str, headers: dict[str, str]) -> None:
    for path in ("gc", "gc/suspend_compaction", "gc/resume_compaction"):
        for body in BAD_BODIES:
            answer = http.put(f"{prefix}/api/v1/bookie/{path}", content=body, headers=headers)
            assert answer.status_code == 400, (path, body[:20], answer.text[:200])
            assert answer.json()["reason"], (path, body[:20])
    assert http.get(f"{prefix}/api/v1/bookie/list_disk_file?file_type=x", headers=headers).status_code == 400


def start_standalone(group: ProcessGroup, tmp_path: Path, *args: str, bookies: int = 1) -> MagnetarProcess:
    return group.add(
        "standalone",
        [
            "standalone", "--data-dir", str(tmp_path / "data"), "--http-port", "0",
            "--bookie-port", str(free_ports(bookies)), "--bookies", str(bookies), *args,
        ],
    )  # fmt: skip


def start_secure_bookie(
    group: ProcessGroup, tmp_path: Path, secret_key: Path, *, closed_metrics: bool = False
) -> MagnetarProcess:
    """A bookie process with authentication on, ``admin`` its superuser, and ``authenticate_metrics_endpoint``
    as shipped (off) unless ``closed_metrics``."""
    env = {"MAGNETAR_AUTHENTICATE_METRICS_ENDPOINT": "true"} if closed_metrics else None
    return group.bookie(
        "bookie", "memory://", tmp_path / "bookie", "--http-port", "0",
        "--authentication-enabled", "--token-secret-key", secret_key.as_uri(), "--super-user-roles", "admin",
        env=env,
    )  # fmt: skip


@pytest.fixture
def http_client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client


def test_standalone_with_authentication_guards_its_bookies_endpoints(
    magnetar_processes: ProcessGroup,
    tmp_path: Path,
    token_keys: TokenKeys,
    secret_key: Path,
    http_client: httpx.Client,
) -> None:
    config = tmp_path / "standalone.toml"
    config.write_text("authenticate_metrics_endpoint = true\n")  # a broker setting, from the config file
    process = start_standalone(
        magnetar_processes, tmp_path, "--config", str(config),
        "--authentication-enabled", "--token-secret-key", secret_key.as_uri(), "--super-user-roles", "admin",
    )  # fmt: skip
    http_client.base_url = httpx.URL(str(process.ready["httpUrl"]))
    callers = tokens(token_keys)
    bookie_id = http_client.get("/api/v1/bookie/info", headers=callers["admin"]).json()["bookieId"]
    assert_access_matrix(http_client, ["", f"/bookies/{bookie_id}"], callers)
    assert_bad_bodies_are_400(http_client, "", callers["admin"])
    assert_bad_bodies_are_400(http_client, f"/bookies/{bookie_id}", callers["admin"])
    unknown = http_client.get("/bookies/127.0.0.1:1/api/v1/bookie/info", headers=callers["none"])
    assert unknown.status_code == 401, "who is not allowed learns nothing, not even which bookies exist"
    assert process.is_running()
    assert process.stop() == 0, process.log_tail()


def test_bookie_process_with_authentication_guards_its_http_port(
    magnetar_processes: ProcessGroup,
    tmp_path: Path,
    token_keys: TokenKeys,
    secret_key: Path,
    http_client: httpx.Client,
) -> None:
    process = start_secure_bookie(magnetar_processes, tmp_path, secret_key, closed_metrics=True)
    http_client.base_url = httpx.URL(f"http://127.0.0.1:{process.ready['httpPort']}")
    callers = tokens(token_keys)
    assert_access_matrix(http_client, [""], callers)
    assert_bad_bodies_are_400(http_client, "", callers["admin"])
    # AutoRecovery's routes on the same port are operators' endpoints, reading or not
    assert_operators_only(http_client, AUTORECOVERY_ROUTES, callers)
    assert process.is_running()
    assert process.stop() == 0, process.log_tail()


def test_autorecovery_process_with_authentication_guards_its_http_port(
    magnetar_processes: ProcessGroup,
    tmp_path: Path,
    token_keys: TokenKeys,
    secret_key: Path,
    http_client: httpx.Client,
) -> None:
    """``magnetar autorecovery`` serves the same operator routes as a bookie: guarded the same way."""
    process = magnetar_processes.add(
        "autorecovery",
        ["autorecovery", "--metadata-url", "memory://", "--http-port", "0", "--bind", "127.0.0.1",
         "--authentication-enabled", "--token-secret-key", secret_key.as_uri(),
         "--super-user-roles", "admin"],
        env={"MAGNETAR_AUTHENTICATE_METRICS_ENDPOINT": "true"},
    )  # fmt: skip
    http_client.base_url = httpx.URL(f"http://127.0.0.1:{process.ready['httpPort']}")
    callers = tokens(token_keys)
    assert_operators_only(http_client, [*AUTORECOVERY_ROUTES, ("GET", "/metrics")], callers)
    metrics = http_client.get("/metrics", headers=callers["admin"])
    assert metrics.status_code == 200
    assert "magnetar_autorecovery_auditor_elected" in metrics.text
    # /heartbeat stays open for the liveness probe, whoever asks
    for headers in callers.values():
        alive = http_client.get("/heartbeat", headers=headers)
        assert (alive.status_code, alive.json()) == (200, "OK")
    assert process.is_running()
    assert process.stop() == 0, process.log_tail()


def test_standalone_serves_each_bookies_http_api_on_its_port(
    magnetar_processes: ProcessGroup, tmp_path: Path, http_client: httpx.Client
) -> None:
    process = start_standalone(magnetar_processes, tmp_path, bookies=2)
    http_client.base_url = httpx.URL(str(process.ready["httpUrl"]))
    info = http_client.get("/api/v1/bookie/info").json()
    ids = [document["bookieId"] for document in info]
    assert len(ids) == 2
    assert all(document["totalSpace"] > 0 for document in info)
    states = http_client.get("/api/v1/bookie/state").json()
    assert [(s["bookieId"], s["running"]) for s in states] == [(bookie_id, True) for bookie_id in ids]
    assert http_client.get("/api/v1/bookie/is_ready").json() == "OK"
    for bookie_id in ids:
        prefix = f"/bookies/{bookie_id}"
        own = http_client.get(f"{prefix}/api/v1/bookie/info").json()
        assert own["bookieId"] == bookie_id  # one bookie: the document itself, as on a bookie's own port
        assert http_client.get(f"{prefix}/api/v1/bookie/state").json()["running"] is True
        passes = http_client.put(f"{prefix}/api/v1/bookie/gc?wait=true").json()
        assert [p["bookieId"] for p in passes] == [bookie_id]
        details = http_client.get(f"{prefix}/api/v1/bookie/gc_details").json()
        assert [d["bookieId"] for d in details] == [bookie_id]
        assert details[0]["gcRuns"] >= 1
        files = http_client.get(f"{prefix}/api/v1/bookie/list_disk_file").json()
        assert files["bookieId"] == bookie_id
        assert files["journal files"]
        suspend = f"{prefix}/api/v1/bookie/gc/suspend_compaction"
        suspended = http_client.put(suspend, json={"suspendMinor": True})
        assert suspended.json() == {"isMajorGcSuspended": "false", "isMinorGcSuspended": "true"}
        page = http_client.get(f"{prefix}/metrics").text
        families = {family.name for family in text_string_to_metric_families(page)}
        assert "bookkeeper_server_ADD_ENTRY_REQUEST" in families
        assert "bookie=" not in page  # a bookie's own page, as on its own port
    # Suspension reached each bookie on its own; the bare path reports any bookie suspended.
    assert http_client.get("/api/v1/bookie/gc/suspend_compaction").json()["isMinorGcSuspended"] == "true"
    missing = http_client.get("/bookies/127.0.0.1:1/api/v1/bookie/info")
    assert missing.status_code == 404
    assert all(bookie_id in missing.json()["reason"] for bookie_id in ids)
    # The broker's /metrics has both bookies' metrics, labelled, each metric named once (a valid page).
    page = http_client.get("/metrics").text
    seen: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(page):
        assert family.name not in seen, f"{family.name} appears twice on /metrics"
        seen[family.name] = {sample.labels.get("bookie", "") for sample in family.samples}
    assert seen["bookie_SERVER_STATUS"] == set(ids)
    assert seen["bookie_DELETED_LEDGER_COUNT"] == set(ids)
    assert any(labels == {""} for labels in seen.values()), "the broker's own metrics are there too"
    assert process.stop() == 0, process.log_tail()


def assert_metrics_open_and_operators_guarded(
    http: httpx.Client, prefixes: list[str], callers: dict[str, dict[str, str]]
) -> None:
    """With the shipped ``authenticate_metrics_endpoint`` (off, as Pulsar's): every caller scrapes
    ``/metrics``, tokenless included, while the operator endpoints still need a superuser."""
    for prefix in prefixes:
        for who, headers in callers.items():
            scraped = http.get(f"{prefix}/metrics", headers=headers)
            assert scraped.status_code == 200, (prefix, who, scraped.text[:200])
            assert "bookkeeper_server_ADD_ENTRY_REQUEST_count" in scraped.text
        assert http.get(f"{prefix}/api/v1/bookie/info", headers=callers["none"]).status_code == 401
        assert http.get(f"{prefix}/api/v1/bookie/info", headers=callers["app"]).status_code == 403


def test_standalone_metrics_follow_the_shipped_setting_open(
    magnetar_processes: ProcessGroup,
    tmp_path: Path,
    token_keys: TokenKeys,
    secret_key: Path,
    http_client: httpx.Client,
) -> None:
    process = start_standalone(
        magnetar_processes, tmp_path,
        "--authentication-enabled", "--token-secret-key", secret_key.as_uri(), "--super-user-roles", "admin",
    )  # fmt: skip
    http_client.base_url = httpx.URL(str(process.ready["httpUrl"]))
    callers = tokens(token_keys)
    bookie_id = http_client.get("/api/v1/bookie/info", headers=callers["admin"]).json()["bookieId"]
    assert_metrics_open_and_operators_guarded(http_client, [f"/bookies/{bookie_id}"], callers)
    broker_metrics = http_client.get("/metrics")  # the broker's page, with the bookies' samples labelled
    assert broker_metrics.status_code == 200
    assert f'bookie="{bookie_id}"' in broker_metrics.text
    assert process.stop() == 0, process.log_tail()


def test_bookie_process_metrics_follow_the_shipped_setting_open(
    magnetar_processes: ProcessGroup,
    tmp_path: Path,
    token_keys: TokenKeys,
    secret_key: Path,
    http_client: httpx.Client,
) -> None:
    process = start_secure_bookie(magnetar_processes, tmp_path, secret_key)
    http_client.base_url = httpx.URL(f"http://127.0.0.1:{process.ready['httpPort']}")
    assert_metrics_open_and_operators_guarded(http_client, [""], tokens(token_keys))
    assert process.stop() == 0, process.log_tail()
