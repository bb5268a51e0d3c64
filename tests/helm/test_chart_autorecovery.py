"""AutoRecovery and racks in the Helm chart: inside every bookie by default, or a Deployment running
``magnetar autorecovery``, or off; the lost-bookie delay and copy rate limits from values; each bookie's rack
from its pod's zone label or a fixed value. The rendered environment is checked against the processes'
settings models (what the pods would really run with)."""

from __future__ import annotations

import os
from typing import Any

import helm_python
import pytest
from fixtures.helm_chart import (
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    Rendered,
    container_environment,
    only_container,
    pod_spec,
    render,
)

from magnetar.admin.processes.autorecovery_wiring import AutoRecoveryProcessSettings, BookieProcessSettings
from magnetar.admin.processes.config import PROCESS_ENV, load_settings, unknown_environment

ZONE_LABEL = "metadata.labels['topology.kubernetes.io/zone']"


def settings_of(environment: dict[str, str], model: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What the process loads from that environment (and nothing else of this machine's)."""
    assert unknown_environment((model,), environment) == []
    for name in list(os.environ):
        if name.startswith("MAGNETAR_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        if name not in PROCESS_ENV:
            monkeypatch.setenv(name, value)
    return load_settings(model, {}).settings


def bookie_env_var(rendered: Rendered, name: str) -> dict[str, Any] | None:
    container = only_container(rendered.get("StatefulSet", "bookie"))
    return next((v for v in container["env"] if v["name"] == name), None)


def autorecovery_deployments(rendered: Rendered) -> list[dict[str, Any]]:
    return [
        obj
        for obj in rendered.of_kind("Deployment")
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] == "autorecovery"
    ]


def test_by_default_autorecovery_runs_in_every_bookie_with_the_values(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"autorecovery": {"lostBookieRecoveryDelaySeconds": 60, "rateBytesPerSecond": 10485760}}
    rendered = render(chart, values)
    assert autorecovery_deployments(rendered) == []
    settings = settings_of(container_environment(rendered, "bookie"), BookieProcessSettings, monkeypatch)
    ar = settings.autorecovery
    assert ar.enabled
    assert ar.lost_bookie_recovery_delay_s == 60
    assert (ar.rereplication_rate_bytes_per_s, ar.rereplication_rate_entries_per_s) == (10485760, 0)
    assert ar.bookkeeper_auth_token is None
    assert not ar.bookkeeper_tls_enabled
    default = settings_of(container_environment(render(chart), "bookie"), BookieProcessSettings, monkeypatch)
    assert default.autorecovery.lost_bookie_recovery_delay_s == 300, "a bookie's restart copies nothing"


def test_the_rack_is_the_pods_zone_label_or_a_fixed_value(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    rack = bookie_env_var(render(chart), "MAGNETAR_RACK")
    assert rack == {"name": "MAGNETAR_RACK", "valueFrom": {"fieldRef": {"fieldPath": ZONE_LABEL}}}
    # a pod without the label gets an empty variable: no rack, not a refused start
    environment = container_environment(render(chart), "bookie", {"MAGNETAR_RACK": ""})
    assert settings_of(environment, BookieProcessSettings, monkeypatch).rack is None
    zoned = container_environment(render(chart), "bookie", {"MAGNETAR_RACK": "europe-west1-b"})
    assert settings_of(zoned, BookieProcessSettings, monkeypatch).rack == "europe-west1-b"

    fixed = render(chart, {"bookie": {"rack": {"name": "rack-a"}}})
    assert bookie_env_var(fixed, "MAGNETAR_RACK") == {"name": "MAGNETAR_RACK", "value": "rack-a"}
    assert (
        bookie_env_var(render(chart, {"bookie": {"rack": {"fromZoneLabel": False}}}), "MAGNETAR_RACK") is None
    )


def test_as_a_deployment_the_bookies_run_none_and_magnetar_autorecovery_runs_with_the_values(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {
        "autorecovery": {"mode": "deployment", "rateEntriesPerSecond": 5000, "deployment": {"replicas": 2}},
        "networkPolicy": {"enabled": True},
    }
    rendered = render(chart, values)
    bookie = settings_of(container_environment(rendered, "bookie"), BookieProcessSettings, monkeypatch)
    assert not bookie.autorecovery.enabled
    (deployment,) = autorecovery_deployments(rendered)
    assert deployment["spec"]["replicas"] == 2
    container = only_container(deployment)
    assert container["args"] == ["autorecovery"]
    environment: dict[str, str] = {}
    for source in container["envFrom"]:
        environment.update(rendered.config_map_data(source["configMapRef"]["name"]))
    environment["MAGNETAR_DAEMON_ID"] = f"{RELEASE}-magnetar-autorecovery-abc12"  # from the pod's name
    settings = settings_of(environment, AutoRecoveryProcessSettings, monkeypatch)
    assert settings.metadata_url.startswith("zk:")
    assert settings.bind_address == "0.0.0.0"
    assert settings.http_port == container["ports"][0]["containerPort"] == 8000
    assert settings.autorecovery.enabled
    assert settings.autorecovery.rereplication_rate_entries_per_s == 5000
    assert pod_spec(deployment)["automountServiceAccountToken"] is False
    # the daemons may reach the bookies and ZooKeeper through the NetworkPolicies
    for component in ("bookie", "zookeeper"):
        policy = rendered.get("NetworkPolicy", component)
        sources = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
        selectors = [peer.get("podSelector", {}).get("matchLabels", {}) for peer in sources]
        assert any(s.get("app.kubernetes.io/component") == "autorecovery" for s in selectors), component


def test_disabled_runs_no_daemon_anywhere(chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = render(chart, {"autorecovery": {"mode": "disabled"}})
    assert autorecovery_deployments(rendered) == []
    bookie = settings_of(container_environment(rendered, "bookie"), BookieProcessSettings, monkeypatch)
    assert not bookie.autorecovery.enabled


@pytest.mark.parametrize("scenario", ["secure", "dev-secure"])
def test_under_security_the_bookies_daemons_reach_other_bookies_as_the_brokers_do(
    chart: helm_python.Chart, scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = render(chart, SCENARIOS[scenario])
    environment = container_environment(rendered, "bookie")
    broker = container_environment(rendered, "broker")
    assert (
        environment["MAGNETAR_AUTORECOVERY__BOOKKEEPER_AUTH_TOKEN"]
        == broker["MAGNETAR_BOOKKEEPER_AUTH_TOKEN"]
    )
    for setting in ("TLS_ENABLED", "TLS_TRUST_CERTS_FILE", "TLS_CERTIFICATE_FILE", "TLS_KEY_FILE"):
        name = f"MAGNETAR_BOOKKEEPER_{setting}"
        if name in broker:
            assert environment[f"MAGNETAR_AUTORECOVERY__BOOKKEEPER_{setting}"] == broker[name], setting
    settings = settings_of(environment, BookieProcessSettings, monkeypatch)
    assert settings.autorecovery.bookkeeper_auth_token
    # the token file is mounted in the bookie pods
    bookie = rendered.get("StatefulSet", "bookie")
    mounts = {m["name"]: m["mountPath"] for m in only_container(bookie)["volumeMounts"]}
    assert mounts["broker-token"] == "/etc/magnetar/broker-token"
    assert "broker-token" in {v["name"] for v in pod_spec(bookie)["volumes"]}


INVALID = {
    "unknown mode": ({"autorecovery": {"mode": "sidecar"}}, r"autorecovery\.mode must be bookie, deployment"),
    "deployment with auth": (
        {**SCENARIOS["secure"], "autorecovery": {"mode": "deployment"}},
        r"autorecovery\.mode=deployment runs `magnetar autorecovery`, and the chart does not pass",
    ),
    "no replicas": (
        {"autorecovery": {"mode": "deployment", "deployment": {"replicas": 0}}},
        r"autorecovery\.deployment\.replicas \(0\) must be >= 1",
    ),
    "negative rate": (
        {"autorecovery": {"rateBytesPerSecond": -1}},
        r"autorecovery\.rateBytesPerSecond must be >= 0",
    ),
    "delay too long": (
        {"autorecovery": {"lostBookieRecoveryDelaySeconds": 90000}},
        r"autorecovery\.lostBookieRecoveryDelaySeconds must be <= 86400",
    ),
    "managed in bookie.config": (
        {"bookie": {"config": {"autorecovery": {"enabled": False}}}},
        r"bookie\.config\.autorecovery__enabled is managed by the chart; set it through autorecovery\.mode",
    ),
    "rack in bookie.config": (
        {"bookie": {"config": {"rack": "a"}}},
        r"bookie\.config\.rack is managed by the chart; set it through bookie\.rack",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_autorecovery_values_that_cannot_work_fail_the_render(chart: helm_python.Chart, case: str) -> None:
    values, message = INVALID[case]
    with pytest.raises(helm_python.HelmRenderError, match=message):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_other_autorecovery_settings_pass_through_bookie_config(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"bookie": {"config": {"autorecovery": {"auditor_periodic_check_interval_s": 3600}}}}
    environment = container_environment(render(chart, values), "bookie")
    settings = settings_of(environment, BookieProcessSettings, monkeypatch)
    assert settings.autorecovery.auditor_periodic_check_interval_s == 3600
