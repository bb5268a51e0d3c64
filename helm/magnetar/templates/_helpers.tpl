{{/*
Names, labels and shared fragments of the Magnetar chart.

Resource names are "<fullname>-<component>" with the full name cut to 40 characters, so the longest
component name ("zookeeper") stays within 52 characters: a StatefulSet's pods carry a
controller-revision-hash label of "<name>-<10 chars>", which must fit in 63.
*/}}

{{- define "magnetar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "magnetar.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of one component's resources. Call with (dict "ctx" $ "component" "bookie"). */}}
{{- define "magnetar.componentName" -}}
{{- printf "%s-%s" (include "magnetar.fullname" .ctx) .component -}}
{{- end -}}

{{- define "magnetar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the pods of one component; they never change after install. */}}
{{- define "magnetar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "magnetar.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every label of one component's resources. Call with (dict "ctx" $ "component" "bookie"). */}}
{{- define "magnetar.labels" -}}
helm.sh/chart: {{ include "magnetar.chart" .ctx }}
{{ include "magnetar.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: magnetar
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end -}}

{{- define "magnetar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "magnetar.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
ZooKeeper connect string: every server of the chart's ensemble by its stable DNS name (the client picks one
and fails over to the next), or the external ensemble's string as given.
*/}}
{{- define "magnetar.zookeeperConnect" -}}
{{- if .Values.zookeeper.enabled -}}
{{- $name := include "magnetar.componentName" (dict "ctx" . "component" "zookeeper") -}}
{{- $hosts := list -}}
{{- $port := ternary .Values.tls.zookeeper.securePort .Values.zookeeper.ports.client .Values.tls.zookeeper.enabled -}}
{{- range $i := until (int .Values.zookeeper.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc.%s:%d" $name $i $name $.Release.Namespace $.Values.clusterDomain (int $port)) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- else -}}
{{- .Values.zookeeper.connect | trimPrefix "zk:" -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.metadataUrl" -}}
{{- printf "zk:%s" (include "magnetar.zookeeperConnect" .) -}}
{{- end -}}

{{/*
Pod anti-affinity from a component's `antiAffinity` values, unless its `affinity` replaces it.
Call with (dict "ctx" $ "component" "bookie" "values" .Values.bookie).
*/}}
{{- define "magnetar.affinity" -}}
{{- $v := .values -}}
{{- if $v.affinity -}}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else if eq $v.antiAffinity.mode "hard" -}}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: {{ $v.antiAffinity.topologyKey }}
        labelSelector:
          matchLabels:
            {{- include "magnetar.selectorLabels" . | nindent 12 }}
{{- else if eq $v.antiAffinity.mode "soft" -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: {{ $v.antiAffinity.topologyKey }}
          labelSelector:
            matchLabels:
              {{- include "magnetar.selectorLabels" . | nindent 14 }}
{{- end -}}
{{- end -}}

{{/* Node selector and tolerations of a component. Call with the component's values. */}}
{{- define "magnetar.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Prometheus scrape annotations for a pod (none when PodMonitors scrape). Call with (dict "ctx" $ "port" 8000). */}}
{{- define "magnetar.prometheusAnnotations" -}}
{{- if and .ctx.Values.prometheusAnnotations (not .ctx.Values.monitoring.podMonitor.enabled) -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/*
A component's free-form `config` values as flat settings: one "name: value" YAML line per setting, nested maps
flattened with "__" (pydantic-settings' nested delimiter: {storage_engine: {journal_group_wait_ms: 2}} becomes
storage_engine__journal_group_wait_ms), names in lower case without a "magnetar_" prefix. Lists are refused:
an environment variable holds text, and role lists are comma-separated text anyway.
Call with (dict "config" .Values.bookie.config "path" "bookie.config" "prefix" "").
*/}}
{{- define "magnetar.flatConfig" -}}
{{- $prefix := .prefix -}}
{{- $path := .path -}}
{{- range $key, $value := .config }}
{{- $name := $key | toString | lower | replace "-" "_" -}}
{{- if not $prefix }}{{ $name = trimPrefix "magnetar_" $name }}{{ end -}}
{{- $name = printf "%s%s" $prefix $name -}}
{{- $where := printf "%s.%s" $path $key -}}
{{- if kindIs "map" $value }}
{{- include "magnetar.flatConfig" (dict "config" $value "path" $where "prefix" (printf "%s__" $name)) }}
{{- else if kindIs "slice" $value }}
{{- fail (printf "%s is a list: give it as text (role lists are comma-separated, e.g. \"a,b\")" $where) }}
{{- else if kindIs "invalid" $value }}
{{- fail (printf "%s has no value" $where) }}
{{- else }}
{{ $name }}: {{ include "magnetar.scalar" $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The setting names the chart manages, each with the value to set instead. A `config` entry naming one of them
(or a nested setting of one, e.g. storage_engine__journal_max_backups) fails the render, so a probe, a volume or
a Secret can never disagree with the process, and keys never land in a plain ConfigMap.
*/}}
{{- define "magnetar.managedSettings" -}}
metadata_url: zookeeper.enabled / zookeeper.connect
cluster: clusterName
bind_address: (always 0.0.0.0)
advertised_address: (the pod's name or IP)
log_level: logLevel
port: bookie.ports.bookie
http_port: bookie.ports.http / broker.httpPort / autorecovery.deployment.httpPort
broker_service_port: broker.brokerServicePort
daemon_id: (the pod's name)
journal_dir: bookie.journal.mountPath
data_dir: bookie.ledgers.mountPath
storage_engine__journal_file_bytes_max: bookie.journal.fileSize
storage_engine__journal_max_backups: bookie.journal.maxBackups
ensemble_size: replication.ensembleSize
write_quorum: replication.writeQuorum
ack_quorum: replication.ackQuorum
default_number_of_namespace_bundles: defaultNumberOfNamespaceBundles
cluster_metadata_init: (the init job initializes the cluster)
authentication_enabled: auth.enabled
token_secret_key: auth.tokenKey
token_public_key: auth.tokenKey
super_user_roles: auth.superUserRoles
auth_allowed_roles: auth.brokerRole
authenticate_metrics_endpoint: auth.authenticateMetricsEndpoint
bookkeeper_auth_token: auth.brokerToken
managed_ledger_password: auth.ledgerPassword
http_port_tls: tls.broker
tls_certificate_file: tls.broker / tls.bookie
tls_key_file: tls.broker / tls.bookie
tls_trust_certs_file: tls.broker / tls.bookie
tls_require_trusted_client_cert: tls.bookie.requireClientCert
bookkeeper_tls_enabled: tls.bookie
rack: bookie.rack
autorecovery__enabled: autorecovery.mode
autorecovery__lost_bookie_recovery_delay_s: autorecovery.lostBookieRecoveryDelaySeconds
autorecovery__rereplication_rate_bytes_per_s: autorecovery.rateBytesPerSecond
autorecovery__rereplication_rate_entries_per_s: autorecovery.rateEntriesPerSecond
autorecovery__bookkeeper_auth_token: auth.brokerToken
autorecovery__bookkeeper_tls_enabled: tls.bookie
autorecovery__bookkeeper_tls_trust_certs_file: tls.bookie
autorecovery__bookkeeper_tls_certificate_file: tls.bookie.requireClientCert
autorecovery__bookkeeper_tls_key_file: tls.bookie.requireClientCert
bookkeeper_tls_trust_certs_file: tls.bookie
bookkeeper_tls_certificate_file: tls.bookie
bookkeeper_tls_key_file: tls.bookie
zk_tls_enabled: tls.zookeeper
zk_tls_trust_certs_file: tls.zookeeper
zk_tls_certificate_file: tls.zookeeper
zk_tls_key_file: tls.zookeeper
{{- end -}}

{{/*
ConfigMap data lines MAGNETAR_<NAME>: "value" for a component's free-form `config` values (flattened, see
magnetar.flatConfig); settings the chart manages are refused with the value to use instead.
Call with (dict "config" .Values.bookie.config "component" "bookie").
*/}}
{{- define "magnetar.configEnv" -}}
{{- $component := .component -}}
{{- $managed := include "magnetar.managedSettings" . | fromYaml -}}
{{- $flat := include "magnetar.flatConfig" (dict "config" .config "path" (printf "%s.config" $component) "prefix" "") | fromYaml -}}
{{- range $setting := keys $flat | sortAlpha }}
{{- $top := regexReplaceAll "__.*$" $setting "" -}}
{{- $owner := "" -}}
{{- if hasKey $managed $setting }}{{ $owner = get $managed $setting }}{{ else if hasKey $managed $top }}{{ $owner = get $managed $top }}{{ end -}}
{{- if $owner }}
{{- fail (printf "%s.config.%s is managed by the chart; set it through %s (see values.yaml)" $component $setting $owner) }}
{{- end }}
{{ printf "MAGNETAR_%s" (upper $setting) }}: {{ get $flat $setting | quote }}
{{- end -}}
{{- end -}}

{{/*
A scalar value as text. Helm reads every number in values as a float, and `toString` would print 10485760
as "1.048576e+07": whole numbers are printed as integers.
*/}}
{{- define "magnetar.scalar" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
Bytes of a Kubernetes quantity given as a whole number with an optional binary (Ki, Mi, Gi, Ti) or decimal
(k, M, G, T) suffix: "10Gi" -> 10737418240. Call with (dict "quantity" "10Gi" "what" "bookie.journal.size").
*/}}
{{- define "magnetar.bytes" -}}
{{- $text := toString .quantity -}}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $number := regexFind "^[0-9]+" $text -}}
{{- $suffix := trimPrefix $number $text -}}
{{- if or (not $number) (not (hasKey $units $suffix)) -}}
{{- fail (printf "%s must be a whole number of bytes with an optional Ki, Mi, Gi, Ti, k, M, G or T suffix, not %q" .what $text) -}}
{{- end -}}
{{- mul (int64 $number) (get $units $suffix) -}}
{{- end -}}

{{/*
The journal's file size and kept backups, sized from its volume, and the check that the journal fits.

A bookie deletes a journal file once a checkpoint has put its entries into the entry logs, keeping
`maxBackups` older ones. At its largest the journal holds: the file being written and the one holding the
checkpoint mark (2 files), the backups, what the write cache holds between checkpoints (its entries are only in
the journal until then; `storage_engine.write_cache_bytes_max`) and the preallocated tail of the current file
(`storage_engine.journal_preallocate_bytes`). That must stay below `usablePercent` of the volume (at the
bookie's `disk_usage_threshold`, 95 %, the volume counts as full and the bookie turns read-only) and leave
`storage_engine.disk_free_bytes_min` free (below it the bookie refuses every add, recovery adds included).

An empty `fileSize` takes what is left after the write cache and the preallocation, shared by the 2 + backups
files, at most 2 GiB (BookKeeper's journalMaxSizeMB) and rounded down to MiB. Renders YAML: fileBytes,
maxBackups, neededBytes, volumeBytes.
*/}}
{{- define "magnetar.journalSizing" -}}
{{- $journal := .Values.bookie.journal -}}
{{- $flat := include "magnetar.flatConfig" (dict "config" .Values.bookie.config "path" "bookie.config" "prefix" "") | fromYaml -}}
{{- $mib := 1048576 -}}
{{- $volume := include "magnetar.bytes" (dict "quantity" $journal.size "what" "bookie.journal.size") | int64 -}}
{{- $cache := get $flat "storage_engine__write_cache_bytes_max" | default (mul 64 $mib) | int64 -}}
{{- $prealloc := get $flat "storage_engine__journal_preallocate_bytes" | default (mul 16 $mib) | int64 -}}
{{- $floor := get $flat "storage_engine__disk_free_bytes_min" | default (mul 64 $mib) | int64 -}}
{{- $backups := int64 $journal.maxBackups -}}
{{- $percent := int64 $journal.usablePercent -}}
{{- if or (lt $percent 10) (gt $percent 95) -}}
{{- fail (printf "bookie.journal.usablePercent must be in 10..95 (the bookie turns read-only at 95 %%), not %d" $percent) -}}
{{- end -}}
{{- if or (lt $backups 0) (gt $backups 1000) -}}
{{- fail (printf "bookie.journal.maxBackups must be in 0..1000, not %d" $backups) -}}
{{- end -}}
{{- $usable := min (div (mul $volume $percent) 100) (sub $volume $floor) -}}
{{- $files := add $backups 2 -}}
{{- $file := 0 -}}
{{- if $journal.fileSize -}}
{{- $file = include "magnetar.bytes" (dict "quantity" $journal.fileSize "what" "bookie.journal.fileSize") | int64 -}}
{{- else -}}
{{- $file = min (mul 2048 $mib) (div (sub (sub $usable $cache) $prealloc) $files) -}}
{{- $file = mul (div $file $mib) $mib -}}
{{- end -}}
{{- $needed := add (mul $files $file) $cache $prealloc -}}
{{- if lt $file $mib -}}
{{- fail (printf "bookie.journal.size (%s) is too small: the %d bytes the journal may use (%d%%, bookie.journal.usablePercent, leaving disk_free_bytes_min %d free) must hold %d journal files of at least 1 MiB (2 + bookie.journal.maxBackups %d), the write cache (%d bytes) and the preallocation (%d bytes)" (toString $journal.size) $usable $percent $floor $files $backups $cache $prealloc) -}}
{{- end -}}
{{- if gt $needed $usable -}}
{{- fail (printf "the journal does not fit its volume: %d files of bookie.journal.fileSize (%d bytes: the current file, the checkpointed one and bookie.journal.maxBackups %d) + the write cache (%d) + the preallocation (%d) = %d bytes, more than the %d bytes of bookie.journal.size %s it may use (%d%%, bookie.journal.usablePercent, leaving disk_free_bytes_min %d free). Raise bookie.journal.size, or lower fileSize or maxBackups" $files $file $backups $cache $prealloc $needed $usable (toString $journal.size) $percent $floor) -}}
{{- end -}}
fileBytes: {{ $file }}
maxBackups: {{ $backups }}
neededBytes: {{ $needed }}
volumeBytes: {{ $volume }}
{{- end -}}

{{/* A volume claim template. Call with (dict "name" "journal" "volume" .Values.bookie.journal). */}}
{{- define "magnetar.volumeClaimTemplate" -}}
- metadata:
    name: {{ .name }}
  spec:
    accessModes: ["ReadWriteOnce"]
    {{- with .volume.storageClassName }}
    storageClassName: {{ if eq . "-" }}""{{ else }}{{ . | quote }}{{ end }}
    {{- end }}
    resources:
      requests:
        storage: {{ .volume.size | quote }}
{{- end -}}

{{/*
Checks of values that Kubernetes would accept but that cannot work. Rendered from validate.yaml, so any
install, upgrade or template run stops here with a message naming the value to change.
*/}}
{{- define "magnetar.validate" -}}
{{- $r := .Values.replication -}}
{{- $e := int $r.ensembleSize -}}
{{- $wq := int $r.writeQuorum -}}
{{- $aq := int $r.ackQuorum -}}
{{- $bookies := int .Values.bookie.replicas -}}
{{- if or (lt $e 1) (lt $wq 1) (lt $aq 1) -}}
{{- fail (printf "replication.ensembleSize (%d), writeQuorum (%d) and ackQuorum (%d) must all be >= 1" $e $wq $aq) -}}
{{- end -}}
{{- if gt $aq $wq -}}
{{- fail (printf "replication.ackQuorum (%d) must be <= replication.writeQuorum (%d)" $aq $wq) -}}
{{- end -}}
{{- if gt $wq $e -}}
{{- fail (printf "replication.writeQuorum (%d) must be <= replication.ensembleSize (%d)" $wq $e) -}}
{{- end -}}
{{- if lt $bookies $aq -}}
{{- fail (printf "bookie.replicas (%d) must be >= replication.ackQuorum (%d): no entry could ever be acknowledged" $bookies $aq) -}}
{{- end -}}
{{- if lt $bookies $e -}}
{{- fail (printf "bookie.replicas (%d) must be >= replication.ensembleSize (%d): a ledger needs that many distinct bookies" $bookies $e) -}}
{{- end -}}
{{- if and .Values.zookeeper.enabled (lt (int .Values.zookeeper.replicas) 1) -}}
{{- fail (printf "zookeeper.replicas (%d) must be >= 1 (or set zookeeper.enabled=false and zookeeper.connect)" (int .Values.zookeeper.replicas)) -}}
{{- end -}}
{{- if and (not .Values.zookeeper.enabled) (not .Values.zookeeper.connect) -}}
{{- fail "zookeeper.connect must name the external ensemble (host:port[,host:port][/chroot]) when zookeeper.enabled is false" -}}
{{- end -}}
{{- if lt (int .Values.broker.replicas) 1 -}}
{{- fail (printf "broker.replicas (%d) must be >= 1" (int .Values.broker.replicas)) -}}
{{- end -}}
{{- $ar := .Values.autorecovery -}}
{{- if not (has $ar.mode (list "bookie" "deployment" "disabled")) -}}
{{- fail (printf "autorecovery.mode must be bookie, deployment or disabled, not %q" $ar.mode) -}}
{{- end -}}
{{- if eq $ar.mode "deployment" -}}
{{- if lt (int $ar.deployment.replicas) 1 -}}
{{- fail (printf "autorecovery.deployment.replicas (%d) must be >= 1 (or set autorecovery.mode)" (int $ar.deployment.replicas)) -}}
{{- end -}}
{{- end -}}
{{- range $setting := list "lostBookieRecoveryDelaySeconds" "rateBytesPerSecond" "rateEntriesPerSecond" -}}
{{- if lt (int64 (index $ar $setting)) 0 -}}
{{- fail (printf "autorecovery.%s must be >= 0, not %v" $setting (index $ar $setting)) -}}
{{- end -}}
{{- end -}}
{{- if gt (int64 $ar.lostBookieRecoveryDelaySeconds) 86400 -}}
{{- fail (printf "autorecovery.lostBookieRecoveryDelaySeconds must be <= 86400, not %v" $ar.lostBookieRecoveryDelaySeconds) -}}
{{- end -}}
{{- range $component := list "zookeeper" "bookie" "broker" -}}
{{- $mode := (index $.Values $component).antiAffinity.mode -}}
{{- if not (has $mode (list "hard" "soft" "none")) -}}
{{- fail (printf "%s.antiAffinity.mode must be hard, soft or none, not %q" $component $mode) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.broker.service.type (list "ClusterIP" "NodePort" "LoadBalancer")) -}}
{{- fail (printf "broker.service.type must be ClusterIP, NodePort or LoadBalancer, not %q" .Values.broker.service.type) -}}
{{- end -}}
{{- if eq .Values.bookie.journal.mountPath .Values.bookie.ledgers.mountPath -}}
{{- fail "bookie.journal.mountPath and bookie.ledgers.mountPath must differ: the journal and the ledgers live on separate volumes" -}}
{{- end -}}
{{- if and .Values.broker.autoscaling.enabled (gt (int .Values.broker.autoscaling.minReplicas) (int .Values.broker.autoscaling.maxReplicas)) -}}
{{- fail "broker.autoscaling.minReplicas must be <= broker.autoscaling.maxReplicas" -}}
{{- end -}}
{{- $bundles := int .Values.defaultNumberOfNamespaceBundles -}}
{{- if or (lt $bundles 1) (gt $bundles 1024) -}}
{{- fail (printf "defaultNumberOfNamespaceBundles must be in 1..1024, not %d" $bundles) -}}
{{- end -}}
{{- range $component := list "zookeeper" "bookie" -}}
{{- $type := (index $.Values $component).updateStrategy.type -}}
{{- if not (has $type (list "RollingUpdate" "OnDelete")) -}}
{{- fail (printf "%s.updateStrategy.type must be RollingUpdate or OnDelete, not %q" $component $type) -}}
{{- end -}}
{{- end -}}
{{- range $ordinal := .Values.bookie.formatOrdinals -}}
{{- if or (not (kindIs "float64" $ordinal)) (lt (int $ordinal) 0) (ge (int $ordinal) $bookies) -}}
{{- fail (printf "bookie.formatOrdinals: %v is not the ordinal of a bookie (0..%d)" $ordinal (sub $bookies 1)) -}}
{{- end -}}
{{- end -}}
{{- $_ := include "magnetar.journalSizing" . -}}
{{- include "magnetar.validateInitJob" . -}}
{{- include "magnetar.validateSecurity" . -}}
{{- end -}}

{{/*
The init job's command retries for at most attempts x (operationTimeoutSeconds + 2 s per ZooKeeper server,
spent saying why a server gave no session) plus the pauses, which double from retryDelaySeconds up to 30 s
(magnetar.admin.processes.cluster_init.retry_budget_s); that must fit the Job's activeDeadlineSeconds.
*/}}
{{- define "magnetar.validateInitJob" -}}
{{- $job := .Values.initJob -}}
{{- if $job.enabled -}}
{{- $attempts := int $job.attempts -}}
{{- $delay := int $job.retryDelaySeconds -}}
{{- $timeout := int $job.operationTimeoutSeconds -}}
{{- if or (lt $attempts 1) (lt $delay 0) (lt $timeout 1) -}}
{{- fail (printf "initJob.attempts (%d) and initJob.operationTimeoutSeconds (%d) must be >= 1, initJob.retryDelaySeconds (%d) >= 0" $attempts $timeout $delay) -}}
{{- end -}}
{{- $servers := int .Values.zookeeper.replicas -}}
{{- if not .Values.zookeeper.enabled -}}
{{- $servers = len (splitList "," (regexReplaceAll "/.*$" (trimPrefix "zk:" .Values.zookeeper.connect) "")) -}}
{{- end -}}
{{- $pauses := 0 -}}
{{- range $i := until (sub $attempts 1 | int) -}}
{{- $pauses = add $pauses (min $delay 30) -}}
{{- $delay = min (mul $delay 2) 30 -}}
{{- end -}}
{{- $budget := add (mul $attempts (add $timeout (mul 2 $servers))) $pauses -}}
{{- if gt $budget (int64 $job.activeDeadlineSeconds) -}}
{{- fail (printf "initJob: the command may retry for %d s (initJob.attempts %d x (operationTimeoutSeconds %d + 2 s per ZooKeeper server x %d) + pauses %d s), more than initJob.activeDeadlineSeconds (%d): raise it or lower the others" $budget $attempts $timeout $servers $pauses (int $job.activeDeadlineSeconds)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Security values that cannot work. */}}
{{- define "magnetar.validateSecurity" -}}
{{- $auth := .Values.auth -}}
{{- if $auth.enabled -}}
{{- if not (has $auth.tokenKey.type (list "secret" "public")) -}}
{{- fail (printf "auth.tokenKey.type must be secret or public, not %q" $auth.tokenKey.type) -}}
{{- end -}}
{{- if not $auth.tokenKey.secretName -}}
{{- fail "auth.enabled needs auth.tokenKey.secretName: a Secret with the cluster's token key (see the README's Security)" -}}
{{- end -}}
{{- if not $auth.brokerToken.secretName -}}
{{- fail "auth.enabled needs auth.brokerToken.secretName: a Secret with the token of auth.brokerRole that brokers present to the bookies" -}}
{{- end -}}
{{- if not $auth.brokerRole -}}
{{- fail "auth.enabled needs auth.brokerRole: the role of the brokers' token, the one role besides superusers the bookies admit" -}}
{{- end -}}
{{- if not $auth.superUserRoles -}}
{{- fail "auth.enabled needs auth.superUserRoles: without a superuser nobody can create tenants or call the bookies' operator endpoints" -}}
{{- end -}}
{{- if and $auth.authenticateMetricsEndpoint .Values.monitoring.podMonitor.enabled (not .Values.monitoring.podMonitor.tokenSecret.name) -}}
{{- fail "auth.authenticateMetricsEndpoint with monitoring.podMonitor.enabled needs monitoring.podMonitor.tokenSecret.name (a superuser's token): the PodMonitors could not scrape /metrics" -}}
{{- end -}}
{{- else if $auth.authenticateMetricsEndpoint -}}
{{- fail "auth.authenticateMetricsEndpoint needs auth.enabled" -}}
{{- end -}}
{{- if not .Values.tls.certManager.enabled -}}
{{- range $component := list "bookie" "zookeeper" "broker" "autorecovery" -}}
{{- if and (include "magnetar.tlsSecretUsed" (dict "ctx" $ "component" $component)) (not (index $.Values.tls $component).secretName) -}}
{{- fail (printf "tls.%s.secretName must name the Secret of the %s certificate (tls.crt, tls.key, ca.crt), or set tls.certManager.enabled" $component (ternary "AutoRecovery daemons'" (printf "%ss'" $component) (eq $component "autorecovery"))) -}}
{{- end -}}
{{- end -}}
{{- else if and (not .Values.tls.certManager.internalIssuer) (not .Values.tls.certManager.issuerRef.name) -}}
{{- fail "tls.certManager.issuerRef.name must name an Issuer or ClusterIssuer (or set tls.certManager.internalIssuer)" -}}
{{- end -}}
{{- end -}}


{{/*
Security wiring: Secrets mounted as files under /etc/magnetar, the settings that point at them (ConfigMap lines,
paths only), and the pieces the waiting init containers and the init job need. Call each with
(dict "ctx" $ "component" "bookie"|"broker"|"autorecovery"|"init").
*/}}

{{/* The Secret of a component's certificate ("init" uses the brokers'). */}}
{{- define "magnetar.tlsSecretName" -}}
{{- $component := ternary "broker" .component (eq .component "init") -}}
{{- $values := index .ctx.Values.tls $component -}}
{{- default (printf "%s-tls" (include "magnetar.componentName" (dict "ctx" .ctx "component" $component))) $values.secretName -}}
{{- end -}}

{{/*
"true" when the component needs its certificate: its own TLS, mutual TLS to the bookies (brokers, and the
AutoRecovery Deployment's daemons, clients of the bookies as the brokers are), ZooKeeper's TLS.
*/}}
{{- define "magnetar.tlsNeeded" -}}
{{- $tls := .ctx.Values.tls -}}
{{- $bookieClient := has .component (list "broker" "autorecovery") -}}
{{- if or $tls.zookeeper.enabled (and (eq .component "bookie") $tls.bookie.enabled) (and (eq .component "broker") $tls.broker.enabled) (and $bookieClient $tls.bookie.enabled $tls.bookie.requireClientCert) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the component needs the CA certificate at least (it talks TLS to someone). */}}
{{- define "magnetar.tlsMounted" -}}
{{- if or (include "magnetar.tlsNeeded" .) (and (has .component (list "broker" "autorecovery")) .ctx.Values.tls.bookie.enabled) -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when the component's certificate Secret (tls.<component>.secretName, or the one cert-manager makes) is
mounted somewhere: its Certificate must exist, or its name be given. ZooKeeper's servers use theirs when the
chart runs them; the AutoRecovery daemons only in mode "deployment".
*/}}
{{- define "magnetar.tlsSecretUsed" -}}
{{- $values := .ctx.Values -}}
{{- if eq .component "zookeeper" -}}
{{- if and $values.tls.zookeeper.enabled $values.zookeeper.enabled }}true{{ end -}}
{{- else if and (eq .component "autorecovery") (ne $values.autorecovery.mode "deployment") -}}
{{- else if include "magnetar.tlsMounted" . -}}
true
{{- end -}}
{{- end -}}

{{/* ZooKeeper client settings over TLS (environment lines "NAME: value"). */}}
{{- define "magnetar.zkTlsSettings" -}}
{{- if .ctx.Values.tls.zookeeper.enabled }}
MAGNETAR_ZK_TLS_ENABLED: "true"
MAGNETAR_ZK_TLS_TRUST_CERTS_FILE: /etc/magnetar/tls/ca.crt
MAGNETAR_ZK_TLS_CERTIFICATE_FILE: /etc/magnetar/tls/tls.crt
MAGNETAR_ZK_TLS_KEY_FILE: /etc/magnetar/tls/tls.key
{{- end }}
{{- end -}}

{{/*
ConfigMap lines of a bookie's, broker's or AutoRecovery daemon's security settings. `magnetar autorecovery`
guards its HTTP port as a bookie does (token key, superusers, authenticated /metrics) and reaches the bookies
with the brokers' token and certificate, through its `autorecovery.bookkeeper_*` settings.
*/}}
{{- define "magnetar.securitySettings" -}}
{{- $auth := .ctx.Values.auth -}}
{{- $tls := .ctx.Values.tls -}}
{{- if $auth.enabled }}
MAGNETAR_AUTHENTICATION_ENABLED: "true"
{{- if eq $auth.tokenKey.type "public" }}
MAGNETAR_TOKEN_PUBLIC_KEY: {{ printf "file:///etc/magnetar/token-key/%s" $auth.tokenKey.key | quote }}
{{- else }}
MAGNETAR_TOKEN_SECRET_KEY: {{ printf "file:///etc/magnetar/token-key/%s" $auth.tokenKey.key | quote }}
{{- end }}
MAGNETAR_SUPER_USER_ROLES: {{ join "," $auth.superUserRoles | quote }}
MAGNETAR_AUTHENTICATE_METRICS_ENDPOINT: {{ $auth.authenticateMetricsEndpoint | toString | quote }}
{{- if eq .component "bookie" }}
MAGNETAR_AUTH_ALLOWED_ROLES: {{ $auth.brokerRole | quote }}
{{- else if eq .component "broker" }}
MAGNETAR_BOOKKEEPER_AUTH_TOKEN: {{ printf "file:///etc/magnetar/broker-token/%s" $auth.brokerToken.key | quote }}
{{- end }}
{{- end }}
{{- if and (eq .component "broker") $auth.ledgerPassword.secretName }}
MAGNETAR_MANAGED_LEDGER_PASSWORD: {{ printf "file:///etc/magnetar/ledger-password/%s" $auth.ledgerPassword.key | quote }}
{{- end }}
{{- if and (eq .component "bookie") $tls.bookie.enabled }}
MAGNETAR_TLS_CERTIFICATE_FILE: /etc/magnetar/tls/tls.crt
MAGNETAR_TLS_KEY_FILE: /etc/magnetar/tls/tls.key
MAGNETAR_TLS_TRUST_CERTS_FILE: /etc/magnetar/tls/ca.crt
MAGNETAR_TLS_REQUIRE_TRUSTED_CLIENT_CERT: {{ $tls.bookie.requireClientCert | toString | quote }}
{{- end }}
{{- if include "magnetar.runsAutorecovery" . }}
{{- /* AutoRecovery (inside a bookie or on its own) reaches the bookies as a client, as the brokers do. */}}
{{- if $auth.enabled }}
MAGNETAR_AUTORECOVERY__BOOKKEEPER_AUTH_TOKEN: {{ printf "file:///etc/magnetar/broker-token/%s" $auth.brokerToken.key | quote }}
{{- end }}
{{- if $tls.bookie.enabled }}
MAGNETAR_AUTORECOVERY__BOOKKEEPER_TLS_ENABLED: "true"
MAGNETAR_AUTORECOVERY__BOOKKEEPER_TLS_TRUST_CERTS_FILE: /etc/magnetar/tls/ca.crt
{{- if $tls.bookie.requireClientCert }}
MAGNETAR_AUTORECOVERY__BOOKKEEPER_TLS_CERTIFICATE_FILE: /etc/magnetar/tls/tls.crt
MAGNETAR_AUTORECOVERY__BOOKKEEPER_TLS_KEY_FILE: /etc/magnetar/tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- if eq .component "broker" }}
{{- if $tls.broker.enabled }}
MAGNETAR_HTTP_PORT_TLS: {{ $tls.broker.port | quote }}
MAGNETAR_BROKER_SERVICE_PORT_TLS: {{ $tls.broker.binaryPort | quote }}
MAGNETAR_TLS_CERTIFICATE_FILE: /etc/magnetar/tls/tls.crt
MAGNETAR_TLS_KEY_FILE: /etc/magnetar/tls/tls.key
MAGNETAR_TLS_TRUST_CERTS_FILE: /etc/magnetar/tls/ca.crt
{{- end }}
{{- if $tls.bookie.enabled }}
MAGNETAR_BOOKKEEPER_TLS_ENABLED: "true"
MAGNETAR_BOOKKEEPER_TLS_TRUST_CERTS_FILE: /etc/magnetar/tls/ca.crt
{{- if $tls.bookie.requireClientCert }}
MAGNETAR_BOOKKEEPER_TLS_CERTIFICATE_FILE: /etc/magnetar/tls/tls.crt
MAGNETAR_BOOKKEEPER_TLS_KEY_FILE: /etc/magnetar/tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- include "magnetar.zkTlsSettings" . }}
{{- end -}}

{{/* Volumes of the Secrets a component reads (pod spec `volumes` items). */}}
{{- define "magnetar.securityVolumes" -}}
{{- $auth := .ctx.Values.auth -}}
{{- if include "magnetar.tlsMounted" . }}
- name: tls
  secret:
    secretName: {{ include "magnetar.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- if and $auth.enabled (ne .component "init") }}
- name: token-key
  secret:
    secretName: {{ $auth.tokenKey.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $auth.tokenKey.key }}
        path: {{ $auth.tokenKey.key }}
{{- if include "magnetar.usesBrokerToken" . }}
- name: broker-token
  secret:
    secretName: {{ $auth.brokerToken.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $auth.brokerToken.key }}
        path: {{ $auth.brokerToken.key }}
{{- end }}
{{- end }}
{{- if and (eq .component "broker") $auth.ledgerPassword.secretName }}
- name: ledger-password
  secret:
    secretName: {{ $auth.ledgerPassword.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $auth.ledgerPassword.key }}
        path: {{ $auth.ledgerPassword.key }}
{{- end }}
{{- end -}}

{{/* Whether a component runs the AutoRecovery daemons: bookies in mode "bookie", the autorecovery Deployment. */}}
{{- define "magnetar.runsAutorecovery" -}}
{{- if or (eq .component "autorecovery") (and (eq .component "bookie") (eq .ctx.Values.autorecovery.mode "bookie")) -}}
true
{{- end -}}
{{- end -}}

{{/* Whether a component reaches bookies with the brokers' token: brokers, and where AutoRecovery runs. */}}
{{- define "magnetar.usesBrokerToken" -}}
{{- if or (eq .component "broker") (include "magnetar.runsAutorecovery" .) -}}
true
{{- end -}}
{{- end -}}

{{/* Mounts of those volumes (container `volumeMounts` items). */}}
{{- define "magnetar.securityMounts" -}}
{{- $auth := .ctx.Values.auth -}}
{{- if include "magnetar.tlsMounted" . }}
- name: tls
  mountPath: /etc/magnetar/tls
  readOnly: true
{{- end }}
{{- if and $auth.enabled (not .zookeeperOnly) (ne .component "init") }}
- name: token-key
  mountPath: /etc/magnetar/token-key
  readOnly: true
{{- if include "magnetar.usesBrokerToken" . }}
- name: broker-token
  mountPath: /etc/magnetar/broker-token
  readOnly: true
{{- end }}
{{- end }}
{{- if and (eq .component "broker") $auth.ledgerPassword.secretName (not .zookeeperOnly) }}
- name: ledger-password
  mountPath: /etc/magnetar/ledger-password
  readOnly: true
{{- end }}
{{- end -}}

{{/*
Environment (container `env` items) of a process that only talks to ZooKeeper: the init job and the waiting
init containers. Call with (dict "ctx" $ "component" "bookie" "operationTimeoutMs" 10000).
*/}}
{{- define "magnetar.metadataClientEnv" -}}
- name: MAGNETAR_METADATA_URL
  value: {{ include "magnetar.metadataUrl" .ctx | quote }}
- name: MAGNETAR_LOG_LEVEL
  value: {{ .ctx.Values.logLevel | quote }}
{{- with .operationTimeoutMs }}
- name: MAGNETAR_METADATA_OPERATION_TIMEOUT_MS
  value: {{ . | quote }}
{{- end }}
{{- range $name, $value := include "magnetar.zkTlsSettings" . | fromYaml }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/*
An init container that waits (`magnetar wait-for-metadata`) until ZooKeeper answers and, for brokers, until the
cluster is initialized and replication.ensembleSize bookies are writable.
Call with (dict "ctx" $ "component" "broker").
*/}}
{{- define "magnetar.waitContainer" -}}
{{- $ctx := .ctx -}}
{{- $wait := $ctx.Values.startupWait -}}
- name: {{ ternary "wait-for-cluster-metadata" "wait-for-zookeeper" (eq .component "broker") }}
  image: {{ include "magnetar.image" $ctx | quote }}
  imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
  args:
    - wait-for-metadata
    {{- if eq .component "broker" }}
    - --cluster
    - {{ $ctx.Values.clusterName | quote }}
    - --bookies-min
    - {{ $ctx.Values.replication.ensembleSize | quote }}
    {{- end }}
    - --timeout-s
    - {{ $wait.timeoutSeconds | quote }}
    - --check-interval-s
    - {{ $wait.checkIntervalSeconds | quote }}
  env:
    {{- include "magnetar.metadataClientEnv" (dict "ctx" $ctx "component" .component "operationTimeoutMs" (mul (int $wait.operationTimeoutSeconds) 1000)) | nindent 4 }}
  resources:
    {{- toYaml $wait.resources | nindent 4 }}
  securityContext:
    {{- toYaml $ctx.Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    {{- with include "magnetar.securityMounts" (dict "ctx" $ctx "component" .component "zookeeperOnly" true) | trim }}
    {{- . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* ConfigMap lines of the AutoRecovery values (the bookies' and the autorecovery Deployment's). */}}
{{- define "magnetar.autorecoverySettings" -}}
{{- $ar := .Values.autorecovery -}}
MAGNETAR_AUTORECOVERY__LOST_BOOKIE_RECOVERY_DELAY_S: {{ include "magnetar.scalar" $ar.lostBookieRecoveryDelaySeconds | quote }}
MAGNETAR_AUTORECOVERY__REREPLICATION_RATE_BYTES_PER_S: {{ include "magnetar.scalar" $ar.rateBytesPerSecond | quote }}
MAGNETAR_AUTORECOVERY__REREPLICATION_RATE_ENTRIES_PER_S: {{ include "magnetar.scalar" $ar.rateEntriesPerSecond | quote }}
{{- end -}}
