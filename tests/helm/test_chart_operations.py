"""What an operator meets in the chart's first week, checked on the rendered manifests: the journal fits its
volume, the init job is the one place that initializes the cluster and the pods wait for what they need,
security is wired from Secrets (token keys, TLS, NetworkPolicies), updates can be staged, monitoring has
PodMonitors and dashboards, and what has not landed yet is a TODO the README cannot lose.

The same manifests run as real processes in ``test_rendered_processes.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import helm_python
import pytest
from fixtures.helm_chart import (
    CHART_DIR,
    COMPONENT,
    DASHBOARD_FILES,
    METRIC_NAME,
    NAMESPACE,
    RELEASE,
    ROOT,
    SCENARIOS,
    Rendered,
    container_environment,
    dashboard_metric_names,
    init_container,
    labels_match,
    only_container,
    pod_spec,
    render,
)

from magnetar.admin.processes.autorecovery_wiring import BookieProcessSettings
from magnetar.admin.processes.cluster_init import retry_budget_s
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings
from magnetar.broker.settings import BrokerSettings

MIB = 1024 * 1024
GIB = 1024 * MIB
BROKER_URL = f"http://{RELEASE}-magnetar-broker.{NAMESPACE}.svc.cluster.local:8080"
ENGINE = BookieStorageSettings()


def bookie_data(rendered: Rendered) -> dict[str, str]:
    return rendered.config_map_data(f"{RELEASE}-magnetar-bookie")


def broker_data(rendered: Rendered) -> dict[str, str]:
    return rendered.config_map_data(f"{RELEASE}-magnetar-broker")


def fails(chart: helm_python.Chart, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmRenderError, match=message):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


# --- the journal fits its volume ------------------------------------------------------------------------


def largest_journal(file_bytes: int, backups: int, write_cache: int, preallocate: int) -> int:
    """The most a bookie's journal holds: the file being written, the one holding the checkpoint mark, the
    kept backups, what the write cache holds until a checkpoint, and the preallocated tail."""
    return (backups + 2) * file_bytes + write_cache + preallocate


@pytest.mark.parametrize(("scenario", "volume_bytes"), [("default", 10 * GIB), ("dev", 1 * GIB)])
def test_the_journal_is_sized_from_its_volume_and_fits(
    chart: helm_python.Chart, scenario: str, volume_bytes: int
) -> None:
    data = bookie_data(render(chart, SCENARIOS[scenario]))
    file_bytes = int(data["MAGNETAR_STORAGE_ENGINE__JOURNAL_FILE_BYTES_MAX"])
    backups = int(data["MAGNETAR_STORAGE_ENGINE__JOURNAL_MAX_BACKUPS"])
    assert backups == 0  # as Pulsar's chart: backups are what fills a dedicated journal volume
    assert file_bytes % MIB == 0
    assert file_bytes <= 2 * GIB
    needed = largest_journal(
        file_bytes, backups, ENGINE.write_cache_bytes_max, ENGINE.journal_preallocate_bytes
    )
    # below 90 % of the volume, so the bookie (read-only at 95 %) never gets there with its own journal, and
    # leaving the free space below which the bookie refuses every add
    assert needed <= volume_bytes * 0.9
    assert volume_bytes - needed >= ENGINE.disk_free_bytes_min
    # and the bookie accepts it
    BookieStorageSettings(journal_file_bytes_max=file_bytes, journal_max_backups=backups)
    if scenario == "dev":
        # The old values - 2 GiB files on a 1 GiB volume - filled the dev journal before its first roll.
        assert file_bytes < volume_bytes / 2


def test_the_journal_sizing_counts_a_configured_write_cache(chart: helm_python.Chart) -> None:
    values = {
        "bookie": {
            "journal": {"size": "256Mi"},
            "config": {
                "storage_engine": {"write_cache_bytes_max": 16 * MIB, "journal_preallocate_bytes": 4 * MIB}
            },
        }
    }
    data = bookie_data(render(chart, values))
    file_bytes = int(data["MAGNETAR_STORAGE_ENGINE__JOURNAL_FILE_BYTES_MAX"])
    assert largest_journal(file_bytes, 0, 16 * MIB, 4 * MIB) <= 256 * MIB - ENGINE.disk_free_bytes_min
    # 64 MiB must stay free (disk_free_bytes_min): on a small volume that is less than 90 % of it
    assert file_bytes == (256 * MIB - 64 * MIB - 20 * MIB) // 2
    engine = {
        "disk_free_bytes_min": 16 * MIB,
        "write_cache_bytes_max": 16 * MIB,
        "journal_preallocate_bytes": 4 * MIB,
    }
    values = {"bookie": {"journal": {"size": "256Mi"}, "config": {"storage_engine": engine}}}
    lower_floor = int(bookie_data(render(chart, values))["MAGNETAR_STORAGE_ENGINE__JOURNAL_FILE_BYTES_MAX"])
    assert lower_floor == (256 * MIB * 90 // 100 - 20 * MIB) // 2 // MIB * MIB
    # Without the smaller cache the default 64 MiB cache leaves less for the files.
    default_cache = int(
        bookie_data(render(chart, {"bookie": {"journal": {"size": "256Mi"}}}))[
            "MAGNETAR_STORAGE_ENGINE__JOURNAL_FILE_BYTES_MAX"
        ]
    )
    assert default_cache < file_bytes


JOURNAL_MISFITS: dict[str, tuple[dict[str, Any], str]] = {
    "the old defaults on the default volume": (
        {"journal": {"fileSize": "2Gi", "maxBackups": 5}},
        r"the journal does not fit its volume: 7 files of bookie\.journal\.fileSize \(2147483648 bytes",
    ),
    "2 GiB files on the dev volume": (
        {"journal": {"size": "1Gi", "fileSize": "2Gi"}},
        r"more than the 966367641 bytes of bookie\.journal\.size 1Gi it may use \(90%",
    ),
    "a volume smaller than the write cache": (
        {"journal": {"size": "64Mi"}},
        r"bookie\.journal\.size \(64Mi\) is too small",
    ),
    "a size the chart cannot read": (
        {"journal": {"size": "1.5Gi"}},
        r'bookie\.journal\.size must be a whole number of bytes .* not "1\.5Gi"',
    ),
    "too many backups": (
        {"journal": {"maxBackups": 2000}},
        r"bookie\.journal\.maxBackups must be in 0\.\.1000",
    ),
    "a usable share past read-only": (
        {"journal": {"usablePercent": 99}},
        r"bookie\.journal\.usablePercent must be in 10\.\.95",
    ),
}


@pytest.mark.parametrize("case", sorted(JOURNAL_MISFITS))
def test_a_journal_that_cannot_fit_fails_the_render(chart: helm_python.Chart, case: str) -> None:
    bookie, message = JOURNAL_MISFITS[case]
    fails(chart, {"bookie": bookie}, message)


def test_an_explicit_journal_file_size_that_fits_is_used(chart: helm_python.Chart) -> None:
    data = bookie_data(render(chart, {"bookie": {"journal": {"fileSize": "512Mi", "maxBackups": 2}}}))
    assert data["MAGNETAR_STORAGE_ENGINE__JOURNAL_FILE_BYTES_MAX"] == str(512 * MIB)
    assert data["MAGNETAR_STORAGE_ENGINE__JOURNAL_MAX_BACKUPS"] == "2"


# --- the init job is the one place that initializes the cluster; pods wait for what they need ------------


def test_the_init_job_initializes_the_cluster_with_the_service_urls_and_bundles(
    chart: helm_python.Chart,
) -> None:
    rendered = render(chart, {"defaultNumberOfNamespaceBundles": 16}, revision=3)
    job = rendered.get("Job", "init")
    # An ordinary Job, so it runs while `helm install --wait` waits for the brokers that wait for it; one per
    # revision, since a Job's pod template cannot change.
    assert "annotations" not in job["metadata"]
    assert job["metadata"]["name"] == f"{RELEASE}-magnetar-init-3"
    assert pod_spec(job)["restartPolicy"] == "Never"
    container = only_container(job)
    args = container["args"]
    assert args[0] == "initialize-cluster-metadata"
    options = dict(zip(args[1::2], args[2::2], strict=True))
    assert options["--cluster"] == "magnetar"
    assert options["--web-service-url"] == BROKER_URL
    assert "--web-service-url-tls" not in options
    assert options["--bundles"] == "16"
    env = container_environment(rendered, "init")
    assert env["MAGNETAR_METADATA_OPERATION_TIMEOUT_MS"] == "10000"
    assert env["MAGNETAR_METADATA_URL"] == broker_data(rendered)["MAGNETAR_METADATA_URL"]
    # Brokers never initialize the cluster themselves (they would write their own pod IP and no bundles).
    data = broker_data(rendered)
    assert data["MAGNETAR_CLUSTER_METADATA_INIT"] == "false"
    assert data["MAGNETAR_DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES"] == "16"
    tls = only_container(render(chart, SCENARIOS["secure"]).get("Job", "init"))["args"]
    assert tls[tls.index("--web-service-url-tls") + 1] == (
        f"https://{RELEASE}-magnetar-broker.{NAMESPACE}.svc.cluster.local:8443"
    )


@pytest.mark.parametrize(
    ("attempts", "delay", "timeout", "servers"), [(10, 2, 10, 3), (1, 0, 30, 1), (30, 5, 5, 1), (4, 1, 2, 5)]
)
def test_the_init_jobs_retry_budget_must_fit_its_deadline(
    chart: helm_python.Chart, attempts: int, delay: int, timeout: int, servers: int
) -> None:
    budget = int(retry_budget_s(attempts, delay, timeout, servers))
    job = {"attempts": attempts, "retryDelaySeconds": delay, "operationTimeoutSeconds": timeout}
    values: dict[str, Any] = {
        "zookeeper": {"replicas": servers},
        "initJob": {**job, "activeDeadlineSeconds": budget},
    }
    rendered = render(chart, values)
    assert rendered.get("Job", "init")["spec"]["activeDeadlineSeconds"] == budget
    values["initJob"]["activeDeadlineSeconds"] = budget - 1
    fails(
        chart,
        values,
        rf"initJob: the command may retry for {budget} s .* more than initJob.activeDeadlineSeconds",
    )
    external = {
        "zookeeper": {
            "enabled": False,
            "connect": ",".join(f"zk{i}:2181" for i in range(servers)) + "/chroot",
        },
        "initJob": {**job, "activeDeadlineSeconds": budget},
    }
    render(chart, external)  # the servers of an external ensemble count the same


def test_the_defaults_fit_helms_default_timeout_and_the_old_ones_did_not(chart: helm_python.Chart) -> None:
    job = render(chart).get("Job", "init")
    assert job["spec"]["activeDeadlineSeconds"] <= 600
    # 30 attempts of a command that itself retried 10 times with up to 30 s pauses: hours, not 900 s.
    fails(chart, {"initJob": {"attempts": 30, "retryDelaySeconds": 5}}, r"initJob: the command may retry for")


def test_bookies_wait_for_zookeeper_and_brokers_for_the_cluster_and_bookies(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["overrides"])
    bookie_wait = init_container(rendered.get("StatefulSet", "bookie"))
    broker_wait = init_container(rendered.get("Deployment", "broker"))
    assert bookie_wait["name"] == "wait-for-zookeeper"
    assert bookie_wait["args"] == ["wait-for-metadata", "--timeout-s", "600", "--check-interval-s", "3"]
    assert broker_wait["name"] == "wait-for-cluster-metadata"
    assert broker_wait["args"][:5] == ["wait-for-metadata", "--cluster", "magnetar", "--bookies-min", "3"]
    for container in (bookie_wait, broker_wait):
        assert container["image"] == only_container(rendered.get("StatefulSet", "bookie"))["image"]
    assert "initContainers" not in pod_spec(render(chart, SCENARIOS["extras"]).get("Deployment", "broker"))


def test_without_the_init_job_the_notes_say_how_to_initialize(chart: helm_python.Chart) -> None:
    rendered = render(chart, {"initJob": {"enabled": False}})
    assert not rendered.of_kind("Job")
    assert "magnetar initialize-cluster-metadata --metadata-url zk:" in rendered.notes
    assert f"--web-service-url {BROKER_URL}" in rendered.notes
    assert "job/demo-magnetar-init-1" in render(chart).notes


def test_a_bookie_whose_volumes_were_lost_can_be_formatted_by_a_job(chart: helm_python.Chart) -> None:
    rendered = render(chart, {"bookie": {"formatOrdinals": [2]}}, revision=7)
    (job,) = [
        obj for obj in rendered.of_kind("Job") if obj["metadata"]["labels"][COMPONENT] == "bookie-format"
    ]
    assert job["metadata"]["name"] == f"{RELEASE}-magnetar-bookie-format-2-7"
    container = only_container(job)
    assert container["args"] == ["bookie", "--format"]  # no --force: it deletes nothing a volume still holds
    pod = f"{RELEASE}-magnetar-bookie-2"
    env = {var["name"]: var["value"] for var in container["env"]}
    assert (
        env["MAGNETAR_ADVERTISED_ADDRESS"] == f"{pod}.{RELEASE}-magnetar-bookie.{NAMESPACE}.svc.cluster.local"
    )
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec(job)["volumes"]
        if "persistentVolumeClaim" in v
    }
    # The claims the StatefulSet made for that bookie (<template>-<statefulset>-<ordinal>)
    assert claims == {"journal": f"journal-{pod}", "ledgers": f"ledgers-{pod}"}
    bookie = only_container(rendered.get("StatefulSet", "bookie"))
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {name: mounts[name] for name in claims} == {
        m["name"]: m["mountPath"] for m in bookie["volumeMounts"] if m["name"] in claims
    }
    (term,) = pod_spec(job)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == {"statefulset.kubernetes.io/pod-name": pod}
    assert container["envFrom"] == bookie["envFrom"]
    assert "Format Jobs run for bookie ordinal(s) 2" in rendered.notes
    assert "Format Jobs" not in render(chart).notes
    fails(
        chart,
        {"bookie": {"formatOrdinals": [3]}},
        r"bookie\.formatOrdinals: 3 is not the ordinal of a bookie \(0\.\.2\)",
    )


# --- security wired from Secrets ------------------------------------------------------------------------


def mounted_files(workload: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """Mount path -> the Secret mounted there, for one container of a workload."""
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod_spec(workload)["volumes"] if "secret" in v}
    return {m["mountPath"]: secrets[m["name"]] for m in container["volumeMounts"] if m["name"] in secrets}


def test_secure_mode_wires_tokens_and_tls_from_secrets(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["secure"])
    bookie = bookie_data(rendered)
    broker = broker_data(rendered)
    for data in (bookie, broker):
        assert data["MAGNETAR_AUTHENTICATION_ENABLED"] == "true"
        assert data["MAGNETAR_TOKEN_SECRET_KEY"] == "file:///etc/magnetar/token-key/secret.key"
        assert data["MAGNETAR_SUPER_USER_ROLES"] == "admin"
        assert data["MAGNETAR_AUTHENTICATE_METRICS_ENDPOINT"] == "true"
        assert data["MAGNETAR_ZK_TLS_ENABLED"] == "true"
        assert ":2281" in data["MAGNETAR_METADATA_URL"]
    # Bookies admit the brokers' role and superusers; brokers present a token of that role.
    assert bookie["MAGNETAR_AUTH_ALLOWED_ROLES"] == "broker"
    assert broker["MAGNETAR_BOOKKEEPER_AUTH_TOKEN"] == "file:///etc/magnetar/broker-token/broker.token"
    assert broker["MAGNETAR_MANAGED_LEDGER_PASSWORD"] == "file:///etc/magnetar/ledger-password/password"
    assert bookie["MAGNETAR_TLS_REQUIRE_TRUSTED_CLIENT_CERT"] == "true"
    assert broker["MAGNETAR_BOOKKEEPER_TLS_ENABLED"] == "true"
    assert broker["MAGNETAR_BOOKKEEPER_TLS_CERTIFICATE_FILE"] == "/etc/magnetar/tls/tls.crt"
    assert broker["MAGNETAR_HTTP_PORT_TLS"] == "8443"
    # Every file a setting names is in a mounted Secret; nothing secret is in a ConfigMap.
    expected = {
        "bookie": {
            "/etc/magnetar/tls": f"{RELEASE}-magnetar-bookie-tls",
            "/etc/magnetar/token-key": "magnetar-token-key",
            # AutoRecovery inside the bookie reaches the other bookies with the brokers' token
            "/etc/magnetar/broker-token": "magnetar-broker-token",
        },
        "broker": {
            "/etc/magnetar/tls": f"{RELEASE}-magnetar-broker-tls",
            "/etc/magnetar/token-key": "magnetar-token-key",
            "/etc/magnetar/broker-token": "magnetar-broker-token",
            "/etc/magnetar/ledger-password": "magnetar-ledger-password",
        },
    }
    for component, kind in (("bookie", "StatefulSet"), ("broker", "Deployment")):
        workload = rendered.get(kind, component)
        container = only_container(workload)
        mounts = mounted_files(workload, container)
        assert mounts == expected[component]
        data = rendered.config_map_data(container["envFrom"][0]["configMapRef"]["name"])
        for name, value in data.items():
            path = value.removeprefix("file://")
            if path.startswith("/etc/magnetar/"):
                assert path.rsplit("/", 1)[0] in mounts, (component, name)
            assert not value.startswith("data:"), name
        # The waiting init container reaches ZooKeeper over TLS with the same certificate.
        wait = init_container(workload)
        assert mounted_files(workload, wait) == {
            "/etc/magnetar/tls": expected[component]["/etc/magnetar/tls"]
        }
    job = rendered.get("Job", "init")
    assert mounted_files(job, only_container(job)) == {"/etc/magnetar/tls": f"{RELEASE}-magnetar-broker-tls"}
    # The broker Service offers HTTPS too; probes stay on the plain port.
    ports = {p["name"]: p["port"] for p in rendered.get("Service", "broker")["spec"]["ports"]}
    assert ports == {"http": 8080, "pulsar": 6650, "https": 8443, "pulsar-ssl": 6651}


def test_own_secrets_and_a_public_key(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["secure-own-secrets"])
    assert not [obj for obj in rendered.objects if obj["apiVersion"].startswith("cert-manager.io/")]
    bookie = rendered.get("StatefulSet", "bookie")
    assert bookie_data(rendered)["MAGNETAR_TOKEN_PUBLIC_KEY"] == "file:///etc/magnetar/token-key/public.key"
    assert bookie_data(rendered)["MAGNETAR_SUPER_USER_ROLES"] == "admin,ops"
    assert mounted_files(bookie, only_container(bookie)) == {
        "/etc/magnetar/tls": "bookie-tls",
        "/etc/magnetar/token-key": "keys",
        "/etc/magnetar/broker-token": "broker-token",
    }
    broker = rendered.get("Deployment", "broker")
    # ZooKeeper's TLS needs the brokers' certificate, though their own port is plain here.
    assert mounted_files(broker, only_container(broker))["/etc/magnetar/tls"] == "broker-tls"
    assert "MAGNETAR_HTTP_PORT_TLS" not in broker_data(rendered)
    zookeeper = rendered.get("StatefulSet", "zookeeper")
    volumes = {v["name"]: v for v in pod_spec(zookeeper)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "zk-tls"


def test_zookeeper_over_tls_keeps_its_probes_on_a_local_plain_port(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["secure"])
    name = f"{RELEASE}-magnetar-zookeeper"
    zoo_cfg = rendered.config_map_data(name)["zoo.cfg"]
    for line in (
        "clientPort=2181",
        "clientPortAddress=127.0.0.1",
        "secureClientPort=2281",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        "ssl.keyStore.type=PEM",
        "ssl.trustStore.location=/tls/ca.crt",
        "ssl.clientAuth=need",
    ):
        assert re.search(rf"^{re.escape(line)}$", zoo_cfg, re.MULTILINE), line
    container = only_container(rendered.get("StatefulSet", "zookeeper"))
    assert "cat /tls/tls.key /tls/tls.crt > /conf/keystore.pem" in container["args"][0]
    assert "/dev/tcp/127.0.0.1/2181" in container["readinessProbe"]["exec"]["command"][-1]
    ports = {p["name"]: p["port"] for p in rendered.get("Service", "zookeeper")["spec"]["ports"]}
    assert ports["secure-client"] == 2281


def test_cert_manager_certificates_name_every_host_they_are_reached_by(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["secure"])
    issuers = {obj["metadata"]["name"]: obj["spec"] for obj in rendered.of_kind("Issuer")}
    assert issuers[f"{RELEASE}-magnetar-selfsigned"] == {"selfSigned": {}}
    assert issuers[f"{RELEASE}-magnetar-ca"] == {"ca": {"secretName": f"{RELEASE}-magnetar-ca"}}
    certificates = {obj["metadata"]["name"]: obj["spec"] for obj in rendered.of_kind("Certificate")}
    assert certificates[f"{RELEASE}-magnetar-ca"]["isCA"] is True
    for component in ("broker", "bookie", "zookeeper"):
        name = f"{RELEASE}-magnetar-{component}"
        spec = certificates[name]
        assert spec["secretName"] == f"{name}-tls"
        assert spec["privateKey"]["encoding"] == "PKCS8"  # ZooKeeper's PEM key store reads no other
        assert set(spec["usages"]) == {"server auth", "client auth"}
        assert spec["issuerRef"] == {
            "name": f"{RELEASE}-magnetar-ca",
            "kind": "Issuer",
            "group": "cert-manager.io",
        }
        assert f"{name}.{NAMESPACE}.svc.cluster.local" in spec["dnsNames"]
        # Bookies are reached by their pod names (their bookie ids), ZooKeeper servers too.
        assert (f"*.{name}.{NAMESPACE}.svc.cluster.local" in spec["dnsNames"]) == (component != "broker")
    external = render(
        chart,
        {"tls": {"certManager": {"enabled": True, "internalIssuer": False, "issuerRef": {"name": "corp"}}}},
    )
    assert not external.of_kind("Certificate")  # nothing uses TLS yet
    corp = render(
        chart,
        {
            "tls": {
                "certManager": {
                    "enabled": True,
                    "internalIssuer": False,
                    "issuerRef": {"name": "corp", "kind": "ClusterIssuer"},
                },
                "broker": {"enabled": True},
            }
        },
    )
    (certificate,) = corp.of_kind("Certificate")
    assert certificate["spec"]["issuerRef"] == {
        "name": "corp",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert not corp.of_kind("Issuer")


def peers(rule: dict[str, Any]) -> list[str]:
    """The components a NetworkPolicy rule admits (by their selector labels)."""
    return sorted(
        peer["podSelector"]["matchLabels"][COMPONENT] for peer in rule["from"] if "podSelector" in peer
    )


def test_network_policies_let_only_brokers_and_bookies_reach_the_bookies(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["secure"])
    policies = {
        obj["metadata"]["labels"][COMPONENT]: obj["spec"] for obj in rendered.of_kind("NetworkPolicy")
    }
    assert set(policies) == {"bookie", "zookeeper"}  # brokers serve clients
    bookie = policies["bookie"]
    pods = rendered.get("StatefulSet", "bookie")["spec"]["template"]["metadata"]["labels"]
    assert labels_match(bookie["podSelector"]["matchLabels"], pods)
    assert bookie["policyTypes"] == ["Ingress"]
    (rule,) = bookie["ingress"]
    assert peers(rule) == ["bookie", "broker"]
    assert sorted(p["port"] for p in rule["ports"]) == [3181, 8000]
    for peer in rule["from"]:
        assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE
    zookeeper = {
        tuple(peers(rule)): sorted(p["port"] for p in rule["ports"])
        for rule in policies["zookeeper"]["ingress"]
    }
    assert zookeeper == {("bookie", "broker", "init"): [2281], ("zookeeper",): [2888, 3888]}
    monitored = render(chart, SCENARIOS["monitoring"])
    rules = [obj["spec"]["ingress"] for obj in monitored.of_kind("NetworkPolicy")]
    metrics = [rule for rules_ in rules for rule in rules_ if "namespaceSelector" in rule["from"][0]]
    assert sorted(rule["ports"][0]["port"] for rule in metrics) == [7000, 8000]
    assert not render(chart).of_kind("NetworkPolicy")


KEYS = {"tokenKey": {"secretName": "k"}, "brokerToken": {"secretName": "t"}}
CLIENT_CERTIFICATES = {"broker": {"secretName": "b"}, "bookie": {"secretName": "c"}}
SECURITY_MISTAKES: dict[str, tuple[dict[str, Any], str]] = {
    "auth without a key": ({"auth": {"enabled": True}}, r"auth\.enabled needs auth\.tokenKey\.secretName"),
    "auth without the brokers' token": (
        {"auth": {"enabled": True, "tokenKey": {"secretName": "k"}}},
        r"auth\.enabled needs auth\.brokerToken\.secretName",
    ),
    "auth without superusers": (
        {"auth": {"enabled": True, **KEYS, "superUserRoles": []}},
        r"auth\.enabled needs auth\.superUserRoles",
    ),
    "an unknown key type": (
        {"auth": {"enabled": True, **KEYS, "tokenKey": {"secretName": "k", "type": "jwk"}}},
        r'auth\.tokenKey\.type must be secret or public, not "jwk"',
    ),
    "authenticated metrics without auth": (
        {"auth": {"authenticateMetricsEndpoint": True}},
        r"auth\.authenticateMetricsEndpoint needs auth\.enabled",
    ),
    "PodMonitors without a token for authenticated metrics": (
        {"auth": {"enabled": True, "tokenKey": {"secretName": "k"}, "brokerToken": {"secretName": "t"},
                  "authenticateMetricsEndpoint": True}, "monitoring": {"podMonitor": {"enabled": True}}},
        r"needs monitoring\.podMonitor\.tokenSecret\.name",
    ),
    "TLS without a certificate": (
        {"tls": {"bookie": {"enabled": True}}},
        r"tls\.bookie\.secretName must name",
    ),
    "ZooKeeper TLS without the servers' certificate": (
        {"tls": {"zookeeper": {"enabled": True}, **CLIENT_CERTIFICATES}},
        r"tls\.zookeeper\.secretName must name",
    ),
    "cert-manager without an issuer": (
        {"tls": {"certManager": {"enabled": True, "internalIssuer": False}}},
        r"tls\.certManager\.issuerRef\.name must name an Issuer",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SECURITY_MISTAKES))
def test_security_values_that_cannot_work_fail_the_render(chart: helm_python.Chart, case: str) -> None:
    values, message = SECURITY_MISTAKES[case]
    fails(chart, values, message)


def test_the_security_settings_are_the_processes_own(chart: helm_python.Chart) -> None:
    """Every security variable the chart sets names a setting of the process that receives it."""
    rendered = render(chart, SCENARIOS["secure"])
    for name, model in (("bookie", BookieProcessSettings), ("broker", BrokerSettings)):
        fields = {f"MAGNETAR_{field.upper()}" for field in model.model_fields}
        top_level = {variable.split("__")[0] for variable in container_environment(rendered, name)}
        assert top_level - fields <= {"MAGNETAR_LOG_LEVEL"}, name


# --- updates --------------------------------------------------------------------------------------------


def test_update_strategies_can_be_staged(chart: helm_python.Chart) -> None:
    default = render(chart)
    assert default.get("StatefulSet", "bookie")["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"partition": 0},
    }
    assert default.get("StatefulSet", "zookeeper")["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    canary = render(chart, SCENARIOS["extras"]).get("StatefulSet", "bookie")
    assert canary["spec"]["updateStrategy"]["rollingUpdate"] == {"partition": 2}
    manual = render(
        chart,
        {
            "bookie": {"updateStrategy": {"type": "OnDelete"}},
            "zookeeper": {"updateStrategy": {"type": "OnDelete"}},
        },
    )
    assert manual.get("StatefulSet", "bookie")["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert manual.get("StatefulSet", "zookeeper")["spec"]["updateStrategy"] == {"type": "OnDelete"}


# --- monitoring -----------------------------------------------------------------------------------------


def test_pod_monitors_scrape_each_component_by_a_named_port(chart: helm_python.Chart) -> None:
    rendered = render(chart, SCENARIOS["monitoring"])
    monitors = {obj["metadata"]["labels"][COMPONENT]: obj for obj in rendered.of_kind("PodMonitor")}
    assert set(monitors) == {"broker", "bookie", "zookeeper"}
    for component, monitor in monitors.items():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        workload = rendered.get("Deployment" if component == "broker" else "StatefulSet", component)
        assert labels_match(
            monitor["spec"]["selector"]["matchLabels"], workload["spec"]["template"]["metadata"]["labels"]
        )
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["port"] in {p["name"] for p in only_container(workload)["ports"]}
        assert "authorization" not in endpoint
    authenticated = render(
        chart,
        {
            **SCENARIOS["secure"],
            "monitoring": {
                "podMonitor": {"enabled": True, "tokenSecret": {"name": "scraper", "key": "token"}}
            },
        },
    )
    for monitor in authenticated.of_kind("PodMonitor"):
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        component = monitor["metadata"]["labels"][COMPONENT]
        expected = (
            None
            if component == "zookeeper"
            else {"type": "Bearer", "credentials": {"name": "scraper", "key": "token"}}
        )
        assert endpoint.get("authorization") == expected


DASHBOARDS = sorted(path.name for path in (CHART_DIR / "dashboards").glob("*.json"))
METRICS_DOC = (ROOT / "docs" / "metrics.md").read_text()


def documented_metric_names() -> set[str]:
    """The names docs/metrics.md lists as exported: every name in its tables, except the "before" column of
    the renames (no longer exported) and the "Not exported" paragraphs (upstream names Magnetar lacks)."""
    exported, _, renames = METRICS_DOC.partition("## Renamed from earlier Magnetar versions")
    paragraphs = [text for text in exported.split("\n\n") if not text.startswith("Not exported")]
    after = [row.split("|")[2] for row in renames.splitlines() if row.startswith("| `")]
    return {name for text in paragraphs for name in METRIC_NAME.findall(text)} | {
        name for cell in after for name in METRIC_NAME.findall(cell)
    }


def renamed_metric_names() -> set[str]:
    _, _, renames = METRICS_DOC.partition("## Renamed from earlier Magnetar versions")
    return {
        name
        for row in renames.splitlines()
        if row.startswith("| `")
        for name in METRIC_NAME.findall(row.split("|")[1])
    }


def family_of(sample: str) -> str:
    """A histogram's or summary's sample name without its suffix (``_bucket``, ``_count``, ``_sum``)."""
    return re.sub(r"_(bucket|count|sum)$", "", sample)


def test_the_dashboards_are_grafana_json(chart: helm_python.Chart) -> None:
    assert tuple(DASHBOARDS) == tuple(sorted(DASHBOARD_FILES))
    config_map = render(chart, SCENARIOS["monitoring"]).get("ConfigMap", "dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert sorted(config_map["data"]) == DASHBOARDS
    uids = set()
    for name in DASHBOARDS:
        dashboard = json.loads(config_map["data"][name])
        assert dashboard == json.loads((CHART_DIR / "dashboards" / name).read_text())
        uids.add(dashboard["uid"])
        variables = {variable["name"] for variable in dashboard["templating"]["list"]}
        assert {"datasource", "instance"} <= variables
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids))
        for panel in dashboard["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert METRIC_NAME.search(target["expr"]), target["expr"]  # each query names its metrics
    assert len(uids) == len(DASHBOARDS)
    assert not render(chart).of_kind("ConfigMap") or all(
        obj["metadata"]["labels"][COMPONENT] != "dashboards" for obj in render(chart).of_kind("ConfigMap")
    )


def test_the_dashboards_query_pulsars_and_bookkeepers_names_as_docs_metrics_lists_them() -> None:
    """Every name a dashboard queries is one docs/metrics.md lists as exported (a histogram's or summary's
    ``_bucket`` / ``_count`` / ``_sum`` by its family), none is a name from before the renames, and the
    Pulsar and BookKeeper figures are queried by their upstream names: ``magnetar_*`` only for what has
    none. ``test_rendered_processes.py`` checks the same names against what real processes export."""
    documented, renamed = documented_metric_names(), renamed_metric_names()
    assert {"pulsar_msg_backlog", "bookie_WRITE_BYTES", "magnetar_bookie_connections"} <= documented
    assert "pulsar_storage_read_rate" not in documented  # listed as not exported
    assert {"magnetar_msg_backlog", "magnetar_bookie_readonly"} <= renamed
    for name in DASHBOARDS:
        used = dashboard_metric_names(name)
        undocumented = {m for m in used if m not in documented and family_of(m) not in documented}
        assert undocumented == set(), name
        assert used & renamed == set(), name
    broker, bookie = (
        dashboard_metric_names("magnetar-broker.json"),
        dashboard_metric_names("magnetar-bookie.json"),
    )
    assert {
        "pulsar_broker_topics_count",
        "pulsar_broker_rate_in",
        "pulsar_msg_backlog",
        "pulsar_ml_count",
    } <= broker
    assert {
        "bookie_SERVER_STATUS",
        "bookkeeper_server_ADD_ENTRY_REQUEST",
        "bookie_journal_JOURNAL_SYNC_count",
    } <= bookie


# --- what has not landed is a TODO the README keeps -----------------------------------------------------


README = (CHART_DIR / "README.md").read_text()


def todo(marker: str) -> bool:
    return any(line.startswith("- [ ] TODO") and marker in line for line in README.splitlines())


def test_the_binary_protocol_tls_port_is_wired(chart: helm_python.Chart) -> None:
    assert "broker_service_port_tls" in BrokerSettings.model_fields
    assert not todo("Pulsar's binary protocol over TLS")
    rendered = render(chart, SCENARIOS["secure"])
    broker = rendered.get("Deployment", "broker")
    container = only_container(broker)
    assert broker_data(rendered)["MAGNETAR_BROKER_SERVICE_PORT_TLS"] == "6651"
    assert {"name": "pulsar-ssl", "containerPort": 6651} in container["ports"]
    service_ports = rendered.get("Service", "broker")["spec"]["ports"]
    assert {"name": "pulsar-ssl", "port": 6651, "targetPort": "pulsar-ssl"} in service_ports
    init_args = only_container(rendered.get("Job", "init"))["args"]
    url = init_args[init_args.index("--broker-service-url-tls") + 1]
    assert url.startswith(f"pulsar+ssl://{RELEASE}-magnetar-broker.")
    assert url.endswith(":6651")
    assert f"pulsar+ssl://{RELEASE}-magnetar-broker." in rendered.notes
    # without tls.broker: no TLS port anywhere
    plain = render(chart)
    assert "MAGNETAR_BROKER_SERVICE_PORT_TLS" not in broker_data(plain)
    assert "--broker-service-url-tls" not in only_container(plain.get("Job", "init"))["args"]
    assert "pulsar-ssl" not in {p["name"] for p in plain.get("Service", "broker")["spec"]["ports"]}


def test_the_console_path_is_a_todo_until_it_lands() -> None:
    consoles = [
        path
        for folder in ("admin", "broker")
        for path in (ROOT / folder).rglob("*console*")
        if "__pycache__" not in path.parts
    ]
    spec = importlib.util.find_spec("magnetar.admin.console")
    assert not consoles, f"a console has landed ({consoles}): give it its path in the chart"
    assert spec is None, "a console has landed (magnetar.admin.console): give it its path in the chart"
    assert todo("console")
