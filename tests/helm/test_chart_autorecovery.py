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
    COMPONENT,
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    Rendered,
    container_environment,
    container_of,
    merged,
    only_container,
    pod_spec,
    render,
)

from magnetar.admin.processes.autorecovery_wiring import AutoRecoveryProcessSettings, BookieProcessSettings
from magnetar.admin.processes.config import PROCESS_ENV, load_settings, unknown_environment
from magnetar.broker.settings import BrokerSettings

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


# --- the Deployment under authentication and TLS ---------------------------------------------------------

SECRETS = {"tokenKey": {"secretName": "keys"}, "brokerToken": {"secretName": "broker-token"}}
CERT_MANAGER = {"certManager": {"enabled": True}}
SECURED: dict[str, dict[str, Any]] = {
    "auth": {"auth": {"enabled": True, **SECRETS}},
    "auth, authenticated metrics": {
        "auth": {"enabled": True, **SECRETS, "authenticateMetricsEndpoint": True}
    },
    "bookie TLS": {"tls": {**CERT_MANAGER, "bookie": {"enabled": True}}},
    "bookie mutual TLS": {"tls": {**CERT_MANAGER, "bookie": {"enabled": True, "requireClientCert": True}}},
    "ZooKeeper TLS": {"tls": {**CERT_MANAGER, "zookeeper": {"enabled": True}}},
    "secure": SCENARIOS["secure"],
}  # fmt: skip
"""Security values with which autorecovery.mode=deployment renders (each with cert-manager's certificates)."""


def secret_mounts(workload: dict[str, Any]) -> dict[str, tuple[str, list[str] | None]]:
    """Mount path -> (the Secret mounted there, its keys when only some are), for the one container; every
    Secret mount read-only."""
    volumes = {v["name"]: v["secret"] for v in pod_spec(workload)["volumes"] if "secret" in v}
    mounts = {}
    for mount in only_container(workload)["volumeMounts"]:
        if mount["name"] in volumes:
            assert mount["readOnly"] is True, mount
            secret = volumes[mount["name"]]
            keys = [item["key"] for item in secret["items"]] if "items" in secret else None
            mounts[mount["mountPath"]] = (secret["secretName"], keys)
    return mounts


def deployment_environment(rendered: Rendered) -> dict[str, str]:
    (deployment,) = autorecovery_deployments(rendered)
    environment: dict[str, str] = {}
    for source in only_container(deployment)["envFrom"]:
        environment.update(rendered.config_map_data(source["configMapRef"]["name"]))
    environment["MAGNETAR_DAEMON_ID"] = f"{RELEASE}-magnetar-autorecovery-abc12"
    return environment


@pytest.mark.parametrize("case", sorted(SECURED))
def test_as_a_deployment_the_daemons_get_the_token_keys_and_certificates_they_need(
    chart: helm_python.Chart, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = merged(SECURED[case], {"autorecovery": {"mode": "deployment"}})
    rendered = render(chart, values)
    environment = deployment_environment(rendered)
    settings = settings_of(environment, AutoRecoveryProcessSettings, monkeypatch)
    broker = settings_of(container_environment(rendered, "broker"), BrokerSettings, monkeypatch)
    auth, tls = values.get("auth", {}), values.get("tls", {})
    bookie_tls, zookeeper_tls = tls.get("bookie", {}), tls.get("zookeeper", {})
    (deployment,) = autorecovery_deployments(rendered)
    mounts = secret_mounts(deployment)
    expected_mounts: dict[str, tuple[str, list[str] | None]] = {}

    # Its HTTP port guarded as a bookie's; the bookies reached with the brokers' token.
    assert settings.authentication_enabled is bool(auth.get("enabled"))
    assert settings.autorecovery.bookkeeper_auth_token == broker.bookkeeper_auth_token
    if auth.get("enabled"):
        key = auth["tokenKey"]["secretName"]
        assert settings.token_secret_key == "file:///etc/magnetar/token-key/secret.key"
        assert settings.super_user_roles == ("admin",)
        assert settings.authenticate_metrics_endpoint is auth.get("authenticateMetricsEndpoint", False)
        assert settings.autorecovery.bookkeeper_auth_token == "file:///etc/magnetar/broker-token/broker.token"
        expected_mounts["/etc/magnetar/token-key"] = (key, ["secret.key"])
        expected_mounts["/etc/magnetar/broker-token"] = (auth["brokerToken"]["secretName"], ["broker.token"])
    else:
        assert settings.autorecovery.bookkeeper_auth_token is None

    # The bookies over TLS (checked against the CA), with the daemons' certificate under mutual TLS.
    ar = settings.autorecovery
    assert ar.bookkeeper_tls_enabled is bool(bookie_tls.get("enabled"))
    assert ar.bookkeeper_tls_trust_certs_file == broker.bookkeeper_tls_trust_certs_file
    assert ar.bookkeeper_tls_certificate_file == broker.bookkeeper_tls_certificate_file
    assert ar.bookkeeper_tls_key_file == broker.bookkeeper_tls_key_file
    if bookie_tls.get("requireClientCert"):
        assert str(ar.bookkeeper_tls_certificate_file) == "/etc/magnetar/tls/tls.crt"
    # ZooKeeper over TLS with the daemons' certificate, at its secure port.
    assert settings.zk_tls_enabled is bool(zookeeper_tls.get("enabled"))
    for setting in ("zk_tls_trust_certs_file", "zk_tls_certificate_file", "zk_tls_key_file"):
        assert getattr(settings, setting) == getattr(broker, setting), setting
    assert settings.metadata_url == broker.metadata_url
    if bookie_tls.get("enabled") or zookeeper_tls.get("enabled"):
        expected_mounts["/etc/magnetar/tls"] = (f"{RELEASE}-magnetar-autorecovery-tls", None)
        (certificate,) = [
            c
            for c in rendered.of_kind("Certificate")
            if c["metadata"]["name"] == f"{RELEASE}-magnetar-autorecovery"
        ]
        assert certificate["spec"]["secretName"] == f"{RELEASE}-magnetar-autorecovery-tls"
        assert certificate["spec"]["usages"] == ["client auth"]  # it serves no TLS
        assert certificate["spec"]["privateKey"]["encoding"] == "PKCS8"  # ZooKeeper's PEM reader's format

    # Exactly these Secrets, read-only, and every file a setting names is in one of them.
    assert mounts == expected_mounts
    for name, value in environment.items():
        path = value.removeprefix("file://")
        if path.startswith("/etc/magnetar/"):
            directory, file = path.rsplit("/", 1)
            assert directory in mounts, name
            assert mounts[directory][1] in (None, [file]), name
    # The liveness probe asks the open /heartbeat, not /metrics, which may need a token.
    probe = only_container(deployment)["livenessProbe"]["httpGet"]
    assert probe == {"path": "/heartbeat", "port": "http"}


def test_a_pod_monitor_scrapes_the_daemons_with_the_scrapers_token(chart: helm_python.Chart) -> None:
    monitoring = {"podMonitor": {"enabled": True, "tokenSecret": {"name": "scraper", "key": "token"}}}
    values = {**SCENARIOS["secure"], "monitoring": monitoring, "autorecovery": {"mode": "deployment"}}
    rendered = render(chart, values)
    monitor = rendered.get("PodMonitor", "autorecovery")
    (deployment,) = autorecovery_deployments(rendered)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "scraper", "key": "token"}}
    # no scrape annotations besides (the annotations cannot carry the token)
    assert "prometheus.io/scrape" not in deployment["spec"]["template"]["metadata"]["annotations"]
    in_bookies = render(chart, {"monitoring": monitoring})
    assert "autorecovery" not in {
        m["metadata"]["labels"][COMPONENT] for m in in_bookies.of_kind("PodMonitor")
    }


def test_every_mounted_certificate_secret_is_made_by_cert_manager(chart: helm_python.Chart) -> None:
    """Bookie TLS without mutual TLS: the brokers and the daemons mount their certificate's Secret for its
    CA; cert-manager must make it (it once made only the Secrets whose certificate was presented)."""
    values = {"tls": {**CERT_MANAGER, "bookie": {"enabled": True}}, "autorecovery": {"mode": "deployment"}}
    rendered = render(chart, values)
    made = {c["spec"]["secretName"] for c in rendered.of_kind("Certificate")}
    mounted = {
        volume["secret"]["secretName"]
        for workload in rendered.workloads()
        for volume in pod_spec(workload).get("volumes", [])
        if volume["name"] == "tls"
    }
    assert mounted == {f"{RELEASE}-magnetar-{c}-tls" for c in ("bookie", "broker", "autorecovery")}
    assert mounted <= made
    # Without cert-manager each of them must be named.
    own = {"tls": {"bookie": {"enabled": True, "secretName": "bookie-tls"}}}
    with pytest.raises(helm_python.HelmRenderError, match=r"tls\.broker\.secretName must name"):
        chart.render(own, name=RELEASE, namespace=NAMESPACE)
    own = merged(
        own, {"tls": {"broker": {"secretName": "broker-tls"}}, "autorecovery": {"mode": "deployment"}}
    )
    with pytest.raises(helm_python.HelmRenderError, match=r"tls\.autorecovery\.secretName must name"):
        chart.render(own, name=RELEASE, namespace=NAMESPACE)
    own = merged(own, {"tls": {"autorecovery": {"secretName": "ar-tls"}}})
    (deployment,) = autorecovery_deployments(render(chart, own))
    assert secret_mounts(deployment) == {"/etc/magnetar/tls": ("ar-tls", None)}


INVALID = {
    "unknown mode": ({"autorecovery": {"mode": "sidecar"}}, r"autorecovery\.mode must be bookie, deployment"),
    "deployment with own certificates but not the daemons'": (
        {**SCENARIOS["secure-own-secrets"], "autorecovery": {"mode": "deployment"}},
        r"tls\.autorecovery\.secretName must name the Secret of the AutoRecovery daemons' certificate",
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
    "the daemon's name in autorecovery.deployment.config": (
        {"autorecovery": {"mode": "deployment", "deployment": {"config": {"daemon_id": "x"}}}},
        r"autorecovery\.deployment\.config\.daemon_id is managed by the chart; "
        r"set it through \(the pod's name\)",
    ),
    "its token in autorecovery.deployment.config": (
        {
            "autorecovery": {
                "mode": "deployment",
                "deployment": {"config": {"autorecovery": {"bookkeeper_auth_token": "token:x"}}},
            }
        },
        r"autorecovery\.deployment\.config\.autorecovery__bookkeeper_auth_token is managed by the chart; "
        r"set it through auth\.brokerToken",
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


def test_as_a_deployment_other_settings_pass_through_its_config_and_it_waits_for_zookeeper(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {
        "autorecovery": {"auditor_periodic_check_interval_s": 3600},
        "metadata_session_timeout_ms": 9000,
    }
    values = {"autorecovery": {"mode": "deployment", "deployment": {"config": config}}}
    rendered = render(chart, merged(SECURED["ZooKeeper TLS"], values))
    settings = settings_of(deployment_environment(rendered), AutoRecoveryProcessSettings, monkeypatch)
    assert settings.autorecovery.auditor_periodic_check_interval_s == 3600
    assert settings.metadata_session_timeout_ms == 9000
    # Its init container waits for ZooKeeper (over TLS, with the daemons' certificate), as a bookie's does.
    wait = container_of(rendered, "autorecovery-wait")
    assert wait["args"][:1] == ["wait-for-metadata"]
    assert "--cluster" not in wait["args"]
    environment = container_environment(rendered, "autorecovery-wait")
    assert environment["MAGNETAR_ZK_TLS_CERTIFICATE_FILE"] == "/etc/magnetar/tls/tls.crt"
    (deployment,) = autorecovery_deployments(rendered)
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    mounts = {m["name"]: m for m in wait["volumeMounts"]}
    assert mounts["tls"]["readOnly"] is True
    assert volumes["tls"]["secret"]["secretName"] == f"{RELEASE}-magnetar-autorecovery-tls"
    no_wait = render(chart, {**values, "startupWait": {"enabled": False}})
    (deployment,) = autorecovery_deployments(no_wait)
    assert "initContainers" not in pod_spec(deployment)


def test_other_autorecovery_settings_pass_through_bookie_config(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"bookie": {"config": {"autorecovery": {"auditor_periodic_check_interval_s": 3600}}}}
    environment = container_environment(render(chart, values), "bookie")
    settings = settings_of(environment, BookieProcessSettings, monkeypatch)
    assert settings.autorecovery.auditor_periodic_check_interval_s == 3600
