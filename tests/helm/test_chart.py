"""Offline checks of the Helm chart in helm/magnetar: lint, render, schema validation, properties.

There is no helm binary and no cluster here. helm-python-sdk runs Helm's own Go library (the linter and
the template engine, Helm v4) in-process through ctypes; kubernetes-validate checks every rendered object
against the Kubernetes JSON schemas of a pinned version in strict mode (an unknown or misplaced field is an
error, as the API server would reject it); yamllint checks the values files and Chart.yaml. What this
cannot show — that the pods start, find each other and serve — needs a cluster (see the chart README).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml
from fixtures.helm_chart import (
    CHART_DIR,
    COMPONENT,
    CONTAINERS,
    EXTERNAL_ZK,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    ROOT,
    SCENARIOS,
    Rendered,
    container_environment,
    labels_match,
    only_container,
    pod_spec,
    render,
    values_file,
)
from pydantic_settings import BaseSettings

from magnetar.admin.processes.autorecovery_wiring import BookieProcessSettings
from magnetar.admin.processes.cluster_init import MetadataClientSettings
from magnetar.admin.processes.config import PROCESS_ENV, load_settings, unknown_environment
from magnetar.broker.settings import BrokerSettings

VALUES_FILES = ["values.yaml", "values-dev.yaml", "values-secure.yaml"]
CUSTOM_RESOURCE_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
"""Objects of these API groups (cert-manager's Certificates and Issuers, the Prometheus Operator's
PodMonitors) have no Kubernetes schema: their structure is checked by their own tests."""


def broker_replication(rendered: Rendered) -> tuple[str, str, str]:
    """E, Qw, Qa as the brokers receive them."""
    data = rendered.config_map_data(f"{RELEASE}-magnetar-broker")
    return data["MAGNETAR_ENSEMBLE_SIZE"], data["MAGNETAR_WRITE_QUORUM"], data["MAGNETAR_ACK_QUORUM"]


def replica_counts(rendered: Rendered) -> tuple[int, int, int]:
    """ZooKeeper servers, bookies, brokers."""
    return (
        rendered.get("StatefulSet", "zookeeper")["spec"]["replicas"],
        rendered.get("StatefulSet", "bookie")["spec"]["replicas"],
        rendered.get("Deployment", "broker")["spec"]["replicas"],
    )


# --- chart metadata, lint, yamllint -------------------------------------------------------------------


def test_chart_metadata_follows_the_package_version(chart: helm_python.Chart) -> None:
    package_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    metadata = chart.metadata
    assert metadata["apiVersion"] == "v2"
    assert metadata["name"] == "magnetar"
    assert metadata["appVersion"] == package_version


@pytest.mark.parametrize("values_name", VALUES_FILES)
def test_helm_lint_strict_passes(values_name: str) -> None:
    values = None if values_name == "values.yaml" else values_file(values_name)
    report = helm_python.lint(CHART_DIR, values, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    # Severity 1 is informational ("icon is recommended"); warnings (2) and errors (3) fail strict lint.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_yamllint_passes_on_values_and_chart_metadata() -> None:
    config = ROOT / "helm" / ".yamllint"
    listed = subprocess.run(
        [sys.executable, "-m", "yamllint", "--list-files", "-c", str(config), "helm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    # The Go templates are ignored, the values files and Chart.yaml are not.
    assert {f"helm/magnetar/{name}" for name in VALUES_FILES} | {"helm/magnetar/Chart.yaml"} <= set(listed)
    assert not [path for path in listed if "/templates/" in path]
    lint = subprocess.run(
        [sys.executable, "-m", "yamllint", "-s", "-c", str(config), "helm"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


KEY_LINE = re.compile(r"^(\s*)[\w.-]+:")


@pytest.mark.parametrize("values_name", VALUES_FILES)
def test_every_value_is_documented(values_name: str) -> None:
    lines = (CHART_DIR / values_name).read_text().splitlines()
    undocumented = []
    for number, line in enumerate(lines):
        if KEY_LINE.match(line) and not lines[number - 1].lstrip().startswith("#"):
            undocumented.append(f"{values_name}:{number + 1}: {line.strip()}")
    assert undocumented == []


# --- every scenario renders to objects the Kubernetes schemas accept ----------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rendered_manifests_validate_strictly(chart: helm_python.Chart, scenario: str) -> None:
    rendered = render(chart, SCENARIOS[scenario])
    assert len(rendered.objects) >= 8
    for obj in rendered.objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["metadata"].get("namespace") == NAMESPACE, name
        if obj["apiVersion"].startswith(CUSTOM_RESOURCE_GROUPS):
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            pytest.fail(f"{scenario}: {name} is invalid at {path}: {error.message}")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_container_runs_as_non_root(chart: helm_python.Chart, scenario: str) -> None:
    rendered = render(chart, SCENARIOS[scenario])
    for workload in rendered.workloads():
        spec = pod_spec(workload)
        pod_context = spec.get("securityContext", {})
        for container in spec["containers"] + spec.get("initContainers", []):
            context = {**pod_context, **container.get("securityContext", {})}
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert context.get("runAsNonRoot") is True, where
            assert context.get("runAsUser", 0) > 0, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("readOnlyRootFilesystem") is True, where
            assert context["capabilities"]["drop"] == ["ALL"], where
        assert spec["automountServiceAccountToken"] is False
        # Service links would inject <SERVICE>_PORT variables into the MAGNETAR_* settings namespace.
        assert spec["enableServiceLinks"] is False


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_environment_from_the_config_maps_reaches_the_containers(
    chart: helm_python.Chart, scenario: str
) -> None:
    rendered = render(chart, SCENARIOS[scenario])
    for component in ("bookie", "broker"):
        workload = rendered.get("StatefulSet" if component == "bookie" else "Deployment", component)
        container = only_container(workload)
        (source,) = container["envFrom"]
        data = rendered.config_map_data(source["configMapRef"]["name"])
        assert data["MAGNETAR_METADATA_URL"].startswith("zk:")
        for key, value in data.items():
            # envFrom silently skips keys that are not valid variable names.
            assert re.fullmatch(r"MAGNETAR_[A-Z0-9_]+", key), key
            assert isinstance(value, str), key
        # The pod-specific address comes from the pod itself, after the ConfigMap.
        env = {var["name"]: var for var in container["env"]}
        assert "MAGNETAR_ADVERTISED_ADDRESS" in env
        assert "MAGNETAR_ADVERTISED_ADDRESS" not in data
        # A config change rolls the pods: the template carries the ConfigMap's checksum.
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])


@pytest.mark.parametrize("scenario", ["default", "secure", "monitoring"])
def test_names_fit_kubernetes_limits_with_the_longest_release_name(
    chart: helm_python.Chart, scenario: str
) -> None:
    release = "r" * 53  # Helm's longest release name
    values = {**SCENARIOS[scenario], "bookie": {"formatOrdinals": [2]}}
    # a Job per revision: a long-lived release's revision numbers grow
    manifests = chart.render(values, name=release, namespace=NAMESPACE, revision=99999)
    objects = [
        doc
        for path, text in manifests.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    names = {(obj["kind"], obj["metadata"]["name"]) for obj in objects}
    assert len(names) == len(objects), "two objects of one kind share a name"
    for kind, name in names:
        assert len(name) <= 63, name
        if kind == "StatefulSet":
            # Pods carry controller-revision-hash=<name>-<10 characters>, a label value of at most 63.
            assert len(name) <= 52, name


# --- bookies ------------------------------------------------------------------------------------------


def test_bookie_has_separate_journal_and_ledger_volumes(chart: helm_python.Chart) -> None:
    rendered = render(chart)
    bookie = rendered.get("StatefulSet", "bookie")
    claims = {claim["metadata"]["name"]: claim for claim in bookie["spec"]["volumeClaimTemplates"]}
    assert set(claims) == {"journal", "ledgers"}
    assert claims["journal"]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claims["ledgers"]["spec"]["resources"]["requests"]["storage"] == "50Gi"
    container = only_container(bookie)
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    data = rendered.config_map_data(container["envFrom"][0]["configMapRef"]["name"])
    assert mounts["journal"] == data["MAGNETAR_JOURNAL_DIR"] == "/var/lib/magnetar/journal"
    assert mounts["ledgers"] == data["MAGNETAR_DATA_DIR"] == "/var/lib/magnetar/ledgers"
    # Neither volume is also declared in the pod: they come only from the claim templates.
    assert {volume["name"] for volume in pod_spec(bookie)["volumes"]}.isdisjoint(claims)


def test_bookie_identity_probes_and_shutdown(chart: helm_python.Chart) -> None:
    rendered = render(chart)
    bookie = rendered.get("StatefulSet", "bookie")
    service = rendered.get("Service", "bookie")
    assert bookie["spec"]["podManagementPolicy"] == "Parallel"
    assert bookie["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    container = only_container(bookie)
    assert container["args"] == ["bookie"]
    env = {var["name"]: var for var in container["env"]}
    assert env["POD_FQDN"]["value"] == (
        f"$(POD_NAME).{service['metadata']['name']}.$(POD_NAMESPACE).svc.cluster.local"
    )
    assert env["MAGNETAR_ADVERTISED_ADDRESS"]["value"] == "$(POD_FQDN)"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"bookie": 3181, "http": 8000}
    # Readiness says whether the bookie takes writes; the startup and liveness probes only that it answers
    # (a read-only bookie, or one whose journal volume is full, must not be restarted for it).
    assert container["readinessProbe"]["httpGet"] == {"path": "/api/v1/bookie/is_ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/heartbeat", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/heartbeat", "port": "http"}
    assert pod_spec(bookie)["terminationGracePeriodSeconds"] >= 60
    assert set(container["resources"]) == {"requests", "limits"}


def test_extra_settings_become_magnetar_environment(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["extras"])
    data = rendered.config_map_data(f"{RELEASE}-magnetar-bookie")
    assert data["MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS"] == "2"
    # A nested map is flattened with pydantic-settings' "__" (it once rendered as "map[...]", which no
    # setting parses); whole numbers stay whole (Helm reads numbers as floats: toString would print
    # 1.073741824e+09).
    assert data["MAGNETAR_STORAGE_ENGINE__ENTRY_LOG_BYTES_MAX"] == "1073741824"
    assert data["MAGNETAR_GC__GC_WAIT_TIME_S"] == "600"
    assert not [value for value in data.values() if value.startswith("map[")]
    broker = rendered.config_map_data(f"{RELEASE}-magnetar-broker")
    assert broker["MAGNETAR_PRODUCER_PENDING_MESSAGES_MAX"] == "1000"
    claims = {
        c["metadata"]["name"]: c["spec"]
        for c in rendered.get("StatefulSet", "bookie")["spec"]["volumeClaimTemplates"]
    }
    assert claims["journal"]["storageClassName"] == "fast-ssd"
    assert claims["ledgers"]["storageClassName"] == ""
    assert "jute.maxbuffer=10485760\n" in rendered.config_map_data(f"{RELEASE}-magnetar-zookeeper")["zoo.cfg"]


def test_image_service_account_and_scheduling_values_reach_the_pods(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["extras"])
    assert not rendered.of_kind("ServiceAccount")
    for workload in rendered.workloads():
        spec = pod_spec(workload)
        assert spec["serviceAccountName"] == "magnetar-runner"
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        if workload["metadata"]["labels"][COMPONENT] != "zookeeper":
            assert only_container(workload)["image"] == "registry.example.com/magnetar:0.1.0-rc1"
    bookie = rendered.get("StatefulSet", "bookie")
    spec = pod_spec(bookie)
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["tolerations"][0]["value"] == "bookie"
    assert {"name": "EXTRA", "value": "1"} in only_container(bookie)["env"]
    assert bookie["spec"]["template"]["metadata"]["annotations"]["example.com/team"] == "storage"


def test_config_change_changes_the_pod_checksum(chart: helm_python.Chart) -> None:
    def checksum(values: dict[str, Any]) -> str:
        bookie = render(chart, values).get("StatefulSet", "bookie")
        annotation: str = bookie["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return annotation

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"bookie": {"config": {"journal_group_wait_ms": 5}}})


# --- brokers ------------------------------------------------------------------------------------------


def test_broker_deployment_service_and_probes(chart: helm_python.Chart) -> None:
    rendered = render(chart)
    broker = rendered.get("Deployment", "broker")
    assert replica_counts(rendered) == (3, 3, 2)
    container = only_container(broker)
    assert container["args"] == ["broker"]
    # The health check is open under authentication, cheap with any number of topics and independent of
    # ZooKeeper; /metrics may need a token (then the kubelet restarts every broker) and grows with topics.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/admin/v2/brokers/health", "port": "http"}, probe
    data = rendered.config_map_data(container["envFrom"][0]["configMapRef"]["name"])
    assert broker_replication(rendered) == ("2", "2", "2")
    assert data["MAGNETAR_HTTP_PORT"] == "8080"
    assert data["MAGNETAR_BROKER_SERVICE_PORT"] == "6650"
    assert {"name": "pulsar", "containerPort": 6650} in container["ports"]
    service = rendered.get("Service", "broker")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http"},
        {"name": "pulsar", "port": 6650, "targetPort": "pulsar"},
    ]
    assert "pulsar://demo-magnetar-broker." in rendered.notes
    init_args = only_container(rendered.get("Job", "init"))["args"]
    url = init_args[init_args.index("--broker-service-url") + 1]
    assert url.startswith("pulsar://demo-magnetar-broker.")
    assert url.endswith(":6650")
    assert labels_match(service["spec"]["selector"], broker["spec"]["template"]["metadata"]["labels"])
    assert not rendered.of_kind("HorizontalPodAutoscaler")
    assert "port-forward service/demo-magnetar-broker 8080:8080" in rendered.notes


def test_load_balancer_and_overrides(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["overrides"])
    service = rendered.get("Service", "broker")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"][0]["nodePort"] == 30080
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/8"]
    assert service["metadata"]["annotations"] == {"example.com/lb": "internal"}
    assert "loadBalancer.ingress" in rendered.notes
    assert replica_counts(rendered) == (5, 5, 4)
    assert broker_replication(rendered) == ("3", "3", "2")


def test_autoscaling_owns_the_broker_replica_count(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["extras"])
    broker = rendered.get("Deployment", "broker")
    assert "replicas" not in broker["spec"]
    (hpa,) = rendered.of_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": broker["metadata"]["name"],
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 4)
    assert rendered.get("Service", "broker")["spec"]["type"] == "NodePort"


# --- placement and disruption -------------------------------------------------------------------------


def anti_affinity(workload: dict[str, Any]) -> dict[str, Any]:
    affinity: dict[str, Any] = pod_spec(workload).get("affinity", {}).get("podAntiAffinity", {})
    return affinity


def test_anti_affinity_by_default(chart: helm_python.Chart) -> None:
    rendered = render(chart)
    for kind, component in (("StatefulSet", "bookie"), ("StatefulSet", "zookeeper")):
        workload = rendered.get(kind, component)
        (term,) = anti_affinity(workload)["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        # The term keeps pods of the same component apart, and only those.
        assert term["labelSelector"]["matchLabels"] == workload["spec"]["selector"]["matchLabels"]
    broker = rendered.get("Deployment", "broker")
    (preferred,) = anti_affinity(broker)["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"]["labelSelector"]["matchLabels"][COMPONENT] == "broker"
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti_affinity(broker)


def test_no_anti_affinity_with_dev_values(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["dev"])
    for workload in rendered.workloads():
        assert "affinity" not in pod_spec(workload), workload["metadata"]["name"]
    assert replica_counts(rendered) == (1, 1, 1)
    assert broker_replication(rendered) == ("1", "1", "1")


def test_soft_anti_affinity_override(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["overrides"])
    bookie = anti_affinity(rendered.get("StatefulSet", "bookie"))
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in bookie
    (preferred,) = bookie["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["weight"] == 100
    assert preferred["podAffinityTerm"]["labelSelector"]["matchLabels"][COMPONENT] == "bookie"
    (broker,) = anti_affinity(rendered.get("Deployment", "broker"))[
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert broker["topologyKey"] == "topology.kubernetes.io/zone"


def test_pod_disruption_budgets_select_their_component(chart: helm_python.Chart) -> None:
    rendered = render(chart)
    pods = {
        workload["metadata"]["labels"][COMPONENT]: workload["spec"]["template"]["metadata"]["labels"]
        for workload in rendered.workloads()
    }
    budgets = rendered.of_kind("PodDisruptionBudget")
    assert {pdb["metadata"]["labels"][COMPONENT] for pdb in budgets} == {"zookeeper", "bookie", "broker"}
    for pdb in budgets:
        component = pdb["metadata"]["labels"][COMPONENT]
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert pdb["spec"]["maxUnavailable"] == 1
        assert [name for name, labels in pods.items() if labels_match(selector, labels)] == [component]
    assert not render(chart, SCENARIOS["dev"]).of_kind("PodDisruptionBudget")


# --- ZooKeeper ----------------------------------------------------------------------------------------


def test_zookeeper_ensemble(chart: helm_python.Chart) -> None:
    rendered = render(chart)
    zookeeper = rendered.get("StatefulSet", "zookeeper")
    service = rendered.get("Service", "zookeeper")
    name = zookeeper["metadata"]["name"]
    assert zookeeper["spec"]["serviceName"] == service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    zoo_cfg = rendered.config_map_data(name)["zoo.cfg"]
    hosts = [f"{name}-{i}.{name}.{NAMESPACE}.svc.cluster.local" for i in range(3)]
    servers = re.findall(r"^server\.(\d+)=(.+)$", zoo_cfg, re.MULTILINE)
    assert servers == [(str(i + 1), f"{host}:2888:3888") for i, host in enumerate(hosts)]
    assert "standaloneEnabled=false" in zoo_cfg
    whitelist = re.search(r"^4lw\.commands\.whitelist=(.+)$", zoo_cfg, re.MULTILINE)
    assert whitelist is not None
    assert {"ruok", "srvr"} <= set(whitelist.group(1).split(","))
    container = only_container(zookeeper)
    assert "ruok" in container["livenessProbe"]["exec"]["command"][-1]
    assert "srvr" in container["readinessProbe"]["exec"]["command"][-1]
    # myid follows the pod ordinal, matching server.<ordinal + 1> above.
    assert "${HOSTNAME##*-} + 1" in container["args"][0]
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/data", "/conf", "/config-source"}
    assert "cp /config-source/zoo.cfg" in container["args"][0]
    # Brokers and bookies get every server in their connect string.
    url = rendered.config_map_data(f"{RELEASE}-magnetar-bookie")["MAGNETAR_METADATA_URL"]
    assert url == "zk:" + ",".join(f"{host}:2181" for host in hosts)
    dev_cfg = render(chart, SCENARIOS["dev"]).config_map_data(name)["zoo.cfg"]
    assert "standaloneEnabled=true" in dev_cfg


def test_external_zookeeper(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["external-zookeeper"])
    assert not [obj for obj in rendered.objects if obj["metadata"]["labels"].get(COMPONENT) == "zookeeper"]
    for component in ("bookie", "broker"):
        data = rendered.config_map_data(f"{RELEASE}-magnetar-{component}")
        assert data["MAGNETAR_METADATA_URL"] == f"zk:{EXTERNAL_ZK}"
    job_env = {var["name"]: var.get("value") for var in only_container(rendered.get("Job", "init"))["env"]}
    assert job_env["MAGNETAR_METADATA_URL"] == f"zk:{EXTERNAL_ZK}"
    # A connect string given with the zk: scheme is not doubled.
    prefixed = render(chart, {"zookeeper": {"enabled": False, "connect": f"zk:{EXTERNAL_ZK}"}})
    assert (
        prefixed.config_map_data(f"{RELEASE}-magnetar-broker")["MAGNETAR_METADATA_URL"] == f"zk:{EXTERNAL_ZK}"
    )


# --- metrics ------------------------------------------------------------------------------------------


def test_prometheus_scrape_annotations(chart: helm_python.Chart) -> None:
    rendered = render(chart)
    expected = {
        ("StatefulSet", "bookie"): "8000",
        ("Deployment", "broker"): "8080",
        ("StatefulSet", "zookeeper"): "7000",
    }
    for (kind, component), port in expected.items():
        annotations = rendered.get(kind, component)["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == port
        assert annotations["prometheus.io/path"] == "/metrics"
    # Off by value, and when the PodMonitors scrape (each target scraped once).
    for scenario in ("extras", "monitoring", "secure"):
        for workload in render(chart, SCENARIOS[scenario]).workloads():
            annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
            assert "prometheus.io/scrape" not in annotations, scenario


# --- values that cannot work fail the render with a message naming them ----------------------------


INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "fewer bookies than the ack quorum": (
        {"bookie": {"replicas": 1}},
        r"bookie\.replicas \(1\) must be >= replication\.ackQuorum \(2\)",
    ),
    "fewer bookies than the ensemble": (
        {"bookie": {"replicas": 2}, "replication": {"ensembleSize": 3, "writeQuorum": 3, "ackQuorum": 2}},
        r"bookie\.replicas \(2\) must be >= replication\.ensembleSize \(3\)",
    ),
    "write quorum above the ensemble": (
        {"replication": {"ensembleSize": 2, "writeQuorum": 3, "ackQuorum": 2}},
        r"replication\.writeQuorum \(3\) must be <= replication\.ensembleSize \(2\)",
    ),
    "ack quorum above the write quorum": (
        {"replication": {"ensembleSize": 3, "writeQuorum": 2, "ackQuorum": 3}},
        r"replication\.ackQuorum \(3\) must be <= replication\.writeQuorum \(2\)",
    ),
    "zero quorum": (
        {"replication": {"ensembleSize": 2, "writeQuorum": 2, "ackQuorum": 0}},
        r"must all be >= 1",
    ),
    "external zookeeper without connect": (
        {"zookeeper": {"enabled": False}},
        r"zookeeper\.connect must name the external ensemble",
    ),
    "unknown anti-affinity mode": (
        {"bookie": {"antiAffinity": {"mode": "sometimes"}}},
        r'bookie\.antiAffinity\.mode must be hard, soft or none, not "sometimes"',
    ),
    "unknown service type": (
        {"broker": {"service": {"type": "Ingress"}}},
        r'broker\.service\.type must be ClusterIP, NodePort or LoadBalancer, not "Ingress"',
    ),
    "journal and ledgers on one path": (
        {"bookie": {"ledgers": {"mountPath": "/var/lib/magnetar/journal"}}},
        r"bookie\.journal\.mountPath and bookie\.ledgers\.mountPath must differ",
    ),
    "chart-managed setting in config": (
        {"bookie": {"config": {"journal_dir": "/elsewhere"}}},
        r"bookie\.config\.journal_dir is managed by the chart; set it through bookie\.journal\.mountPath",
    ),
    "chart-managed replication in broker config": (
        {"broker": {"config": {"MAGNETAR_ACK_QUORUM": 1}}},
        r"broker\.config\.ack_quorum is managed by the chart; set it through replication\.ackQuorum",
    ),
    "chart-managed nested setting": (
        {"bookie": {"config": {"storage_engine": {"journal_max_backups": 5}}}},
        r"bookie\.config\.storage_engine__journal_max_backups is managed by the chart; set it through "
        r"bookie\.journal\.maxBackups",
    ),
    "a key in a ConfigMap": (
        {"broker": {"config": {"token_secret_key": "data:;base64,c2VjcmV0"}}},
        r"broker\.config\.token_secret_key is managed by the chart; set it through auth\.tokenKey",
    ),
    "a list in config": (
        {"broker": {"config": {"super_user_roles": ["a", "b"]}}},
        r"broker\.config\.super_user_roles is a list: give it as text",
    ),
    "a list nested in config": (
        {"bookie": {"config": {"gc": {"paths": ["a"]}}}},
        r"bookie\.config\.gc\.paths is a list",
    ),
    "unknown update strategy": (
        {"bookie": {"updateStrategy": {"type": "Recreate"}}},
        r'bookie\.updateStrategy\.type must be RollingUpdate or OnDelete, not "Recreate"',
    ),
    "bundles out of range": (
        {"defaultNumberOfNamespaceBundles": 0},
        r"defaultNumberOfNamespaceBundles must be in 1\.\.1024, not 0",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_values_fail_with_a_clear_message(chart: helm_python.Chart, case: str) -> None:
    values, message = INVALID[case]
    with pytest.raises(helm_python.HelmRenderError, match=message):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


# --- the container image definition -------------------------------------------------------------------


def test_dockerfile_is_multi_stage_non_root_and_runs_magnetar() -> None:
    text = (CHART_DIR / "Dockerfile").read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith(("#", " "))]
    stages = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert len(stages) == 2
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in instructions
    build, final = instructions[stages[0] : stages[1]], instructions[stages[1] :]
    assert any(line.endswith("pip install .") for line in build)
    # Only the built environment crosses into the final image; no compiler is installed anywhere.
    assert [line for line in final if line.startswith("COPY")] == [
        "COPY --from=build /opt/magnetar /opt/magnetar"
    ]
    assert not re.search(r"\b(gcc|build-essential|apt-get install)\b", text)
    (user,) = [line for line in final if line.startswith("USER ")]
    assert user == "USER 10001:10001"
    assert final[-2:] == ['ENTRYPOINT ["magnetar"]', 'CMD ["--help"]']
    # The chart's pod security context runs as the image's user.
    defaults = values_file("values.yaml")["podSecurityContext"]
    assert (defaults["runAsUser"], defaults["runAsGroup"], defaults["fsGroup"]) == (10001, 10001, 10001)


# --- the process contract -----------------------------------------------------------------------------
# Bookies and brokers read their settings from MAGNETAR_* variables (pydantic-settings); a variable that
# names no setting is silently ignored by the model, so a chart that spells one wrong deploys processes that
# run on a default - as MAGNETAR_BIND once did (the setting is bind_address: brokers listened on 127.0.0.1
# inside their pods). Every variable of the rendered ConfigMaps and pod templates must name a setting of the
# process that receives it, and the whole environment must validate through the loader the processes use.

MODELS: dict[str, type[BaseSettings]] = {
    "bookie": BookieProcessSettings,
    "broker": BrokerSettings,
    "init": MetadataClientSettings,
    "bookie-wait": MetadataClientSettings,
    "broker-wait": MetadataClientSettings,
}
"""The settings model of each Magnetar container (the init job and the waiting init containers run
``initialize-cluster-metadata`` and ``wait-for-metadata``, which read only how to reach the store)."""


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("container", sorted(MODELS))
def test_every_variable_names_a_setting_and_the_settings_validate(
    chart: helm_python.Chart, scenario: str, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = render(chart, SCENARIOS[scenario])
    if container.endswith("-wait") and not SCENARIOS[scenario].get("startupWait", {}).get("enabled", True):
        assert not pod_spec(rendered.get(*CONTAINERS[container][:2])).get("initContainers")
        return
    environment = container_environment(rendered, container)
    model = MODELS[container]
    assert unknown_environment((model,), environment) == []
    for name in list(os.environ):
        if name.startswith("MAGNETAR_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        if name not in PROCESS_ENV:
            monkeypatch.setenv(name, value)
    settings: Any = load_settings(model, {}).settings
    assert settings.metadata_url.startswith("zk:")
    if model is not MetadataClientSettings:
        assert settings.bind_address == "0.0.0.0"  # reachable from other pods
        assert settings.advertised_address


def test_broker_replication_reaches_the_broker_settings(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"replication": {"ensembleSize": 3, "writeQuorum": 3, "ackQuorum": 2}}
    environment = container_environment(render(chart, values), "broker")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(BrokerSettings, {}).settings
    assert (settings.ensemble_size, settings.write_quorum, settings.ack_quorum) == (3, 3, 2)
    assert settings.cluster == "magnetar"


def test_advertised_listeners_reach_each_broker_with_its_pod_name(chart: helm_python.Chart) -> None:
    """``broker.advertisedListeners`` becomes MAGNETAR_ADVERTISED_LISTENERS with ``$(POD_NAME)`` expanded per
    pod, and the broker's settings accept what a pod gets; unset, neither variable is rendered."""
    listeners = "internal:pulsar://$(POD_IP):6650,external:pulsar://$(POD_NAME).brokers.example.com:16650"
    values = {"broker": {"advertisedListeners": listeners, "internalListenerName": "internal"}}
    rendered = render(chart, values)
    pod = {"POD_IP": "10.1.2.3", "POD_NAME": "magnetar-broker-7d9f-abcde"}
    environment = container_environment(rendered, "broker", pod)
    assert environment["MAGNETAR_ADVERTISED_LISTENERS"] == (
        "internal:pulsar://10.1.2.3:6650,external:pulsar://magnetar-broker-7d9f-abcde.brokers.example.com:16650"
    )
    assert environment["MAGNETAR_INTERNAL_LISTENER_NAME"] == "internal"
    settings = BrokerSettings.model_validate(
        {
            "metadata_url": "memory://",
            "advertised_listeners": environment["MAGNETAR_ADVERTISED_LISTENERS"],
            "internal_listener_name": "internal",
        }
    )
    assert [listener.name for listener in settings.listeners()] == ["internal", "external"]
    default = container_environment(render(chart), "broker")
    assert "MAGNETAR_ADVERTISED_LISTENERS" not in default
    assert "MAGNETAR_INTERNAL_LISTENER_NAME" not in default
