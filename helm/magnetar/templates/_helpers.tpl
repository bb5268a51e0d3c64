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
{{- range $i := until (int .Values.zookeeper.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc.%s:%d" $name $i $name $.Release.Namespace $.Values.clusterDomain (int $.Values.zookeeper.ports.client)) -}}
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

{{/* Prometheus scrape annotations for a pod. Call with (dict "ctx" $ "port" 8000). */}}
{{- define "magnetar.prometheusAnnotations" -}}
{{- if .ctx.Values.prometheusAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/*
ConfigMap data lines MAGNETAR_<NAME>: "value" for a component's free-form `config` values. Settings the
chart manages are refused, so a probe or a volume can never disagree with the process.
Call with (dict "config" .Values.bookie.config "reserved" (list "port") "component" "bookie").
*/}}
{{- define "magnetar.configEnv" -}}
{{- $component := .component -}}
{{- $reserved := .reserved -}}
{{- range $key, $value := .config }}
{{- $setting := $key | lower | replace "-" "_" | trimPrefix "magnetar_" -}}
{{- if has $setting $reserved -}}
{{- fail (printf "%s.config.%s is managed by the chart; set it through the chart's own values (see values.yaml)" $component $key) -}}
{{- end }}
{{ printf "MAGNETAR_%s" (upper $setting) }}: {{ include "magnetar.scalar" $value | quote }}
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
{{- end -}}
