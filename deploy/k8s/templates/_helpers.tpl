{{/*
Naming, labels, image, secrets and validation helpers.
The component workload (Deployment + Service) is in _component.tpl.
*/}}

{{/* Chart name, overridable with nameOverride. */}}
{{- define "pies.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified release name, truncated to 63 characters (DNS label limit).
If the release name already contains the chart name it is used as is ("pies" -> "pies").
*/}}
{{- define "pies.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of a component's Deployment and Service. Call with (dict "root" $ "name" "catalog"). */}}
{{- define "pies.componentName" -}}
{{- printf "%s-%s" (include "pies.fullname" .root) .name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* In-cluster URL of a backend component. Call with (dict "root" $ "name" "catalog"). */}}
{{- define "pies.componentUrl" -}}
{{- $port := (index .root.Values .name).port | int64 }}
{{- printf "http://%s:%d" (include "pies.componentName" .) $port }}
{{- end }}

{{/*
EXECUTOR_URL of the runs service (experiments replay through the executor's Execute): the
executor's Service, or with gateway.embedExecutor the edge's executor port (gateway.executorPort)
on the gateway's Service, or on <fullname>-gateway-internal when the gateway's Service is not
ClusterIP (see internalPort in _component.tpl).
*/}}
{{- define "pies.executorUrl" -}}
{{- if .Values.gateway.embedExecutor }}
{{- $service := ternary "gateway" "gateway-internal" (eq (dig "service" "type" "ClusterIP" .Values.gateway) "ClusterIP") }}
{{- printf "http://%s:%d" (include "pies.componentName" (dict "root" . "name" $service)) (.Values.gateway.executorPort | int64) }}
{{- else }}
{{- include "pies.componentUrl" (dict "root" . "name" "executor") }}
{{- end }}
{{- end }}

{{/* Chart label value. */}}
{{- define "pies.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Image tag: image.tag, defaulting to the chart's appVersion. */}}
{{- define "pies.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString }}
{{- end }}

{{/* Full image reference. */}}
{{- define "pies.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "pies.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
Selector labels. Call with (dict "root" $) or (dict "root" $ "component" "catalog").
*/}}
{{- define "pies.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pies.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/*
Kubernetes recommended labels. Call with (dict "root" $) or (dict "root" $ "component" "catalog").
*/}}
{{- define "pies.labels" -}}
helm.sh/chart: {{ include "pies.chart" .root }}
{{ include "pies.selectorLabels" . }}
app.kubernetes.io/version: {{ include "pies.imageTag" .root | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: pies
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/*
A map of annotations with every value quoted: Kubernetes wants strings, and YAML would otherwise turn
"true", "off" or 5 into other types.
*/}}
{{- define "pies.stringMap" -}}
{{- $lines := list }}
{{- range $k, $v := . }}
{{- $lines = append $lines (printf "%s: %s" $k ($v | toString | quote)) }}
{{- end }}
{{- join "\n" $lines }}
{{- end }}

{{/* ServiceAccount used by every pod. */}}
{{- define "pies.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pies.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the Secret the chart creates for values given inline (database.url, secretKey.value). */}}
{{- define "pies.secretName" -}}
{{- include "pies.fullname" . }}
{{- end }}

{{/* Secret name and key holding DATABASE_URL. */}}
{{- define "pies.database.secretName" -}}
{{- .Values.database.existingSecret | default (include "pies.secretName" .) }}
{{- end }}
{{- define "pies.database.secretKey" -}}
{{- if .Values.database.existingSecret }}
{{- .Values.database.existingSecretKey | default "database-url" }}
{{- else }}
{{- "database-url" }}
{{- end }}
{{- end }}

{{/* Secret name and key holding PIES_SECRET_KEY. */}}
{{- define "pies.secretKey.secretName" -}}
{{- .Values.secretKey.existingSecret | default (include "pies.secretName" .) }}
{{- end }}
{{- define "pies.secretKey.secretKey" -}}
{{- if .Values.secretKey.existingSecret }}
{{- .Values.secretKey.existingSecretKey | default "secret-key" }}
{{- else }}
{{- "secret-key" }}
{{- end }}
{{- end }}

{{/* Secret name and key holding PIES_INTERNAL_TOKEN. */}}
{{- define "pies.internalToken.secretName" -}}
{{- .Values.internalToken.existingSecret | default (include "pies.secretName" .) }}
{{- end }}
{{- define "pies.internalToken.secretKey" -}}
{{- if .Values.internalToken.existingSecret }}
{{- .Values.internalToken.existingSecretKey | default "internal-token" }}
{{- else }}
{{- "internal-token" }}
{{- end }}
{{- end }}

{{/*
The internal token the chart stores: internalToken.value, else the one already in the release's
Secret (so an upgrade keeps it), else a new random one.
*/}}
{{- define "pies.internalToken.value" -}}
{{- if .Values.internalToken.value }}
{{- .Values.internalToken.value }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "pies.secretName" .) }}
{{- if and $existing (index ($existing.data | default dict) "internal-token") }}
{{- index $existing.data "internal-token" | b64dec }}
{{- else }}
{{- randAlphaNum 48 }}
{{- end }}
{{- end }}
{{- end }}

{{/* PIES_INTERNAL_TOKEN, for every component. */}}
{{- define "pies.env.internalToken" -}}
- name: PIES_INTERNAL_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "pies.internalToken.secretName" . }}
      key: {{ include "pies.internalToken.secretKey" . }}
{{- end }}

{{/* DATABASE_URL, DATABASE_POOL_MAX and DATABASE_PREPARED_STATEMENTS, shared by catalog and runs. */}}
{{- define "pies.env.database" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "pies.database.secretName" . }}
      key: {{ include "pies.database.secretKey" . }}
- name: DATABASE_POOL_MAX
  value: {{ .Values.database.poolMax | int64 | quote }}
- name: DATABASE_PREPARED_STATEMENTS
  value: {{ .Values.database.preparedStatements | toString | quote }}
{{- end }}

{{/* NATS connection settings, shared by catalog, executor and gateway. */}}
{{- define "pies.env.nats" -}}
- name: NATS_URL
  value: {{ required "nats.url is required" .Values.nats.url | quote }}
- name: PIES_NATS_STREAM
  value: {{ .Values.nats.stream | quote }}
- name: PIES_NATS_SUBJECT_PREFIX
  value: {{ .Values.nats.subjectPrefix | quote }}
- name: PIES_NATS_REPLICAS
  value: {{ .Values.nats.replicas | int64 | quote }}
{{- end }}

{{/* Fails the render with a readable message when required values are missing or wrong. */}}
{{- define "pies.validateValues" -}}
{{- if not (or .Values.database.existingSecret .Values.database.url) }}
{{- fail "\n\nDATABASE_URL is required: set database.existingSecret (a Secret with key database.existingSecretKey) or database.url." }}
{{- end }}
{{- if not (or .Values.secretKey.existingSecret .Values.secretKey.value) }}
{{- fail "\n\nPIES_SECRET_KEY is required: set secretKey.existingSecret (a Secret with key secretKey.existingSecretKey) or secretKey.value (generate one with: openssl rand -base64 32)." }}
{{- end }}
{{- if and .Values.secretKey.value (not .Values.secretKey.existingSecret) }}
{{- if ne (len (b64dec .Values.secretKey.value)) 32 }}
{{- fail "\n\nsecretKey.value must be the base64 encoding of exactly 32 random bytes (openssl rand -base64 32)." }}
{{- end }}
{{- end }}
{{- if and .Values.internalToken.value (not .Values.internalToken.existingSecret) (lt (len .Values.internalToken.value) 32) }}
{{- fail "\n\ninternalToken.value must be at least 32 characters (openssl rand -base64 32), or leave it empty to have one generated." }}
{{- end }}
{{- range $name := list "catalog" "runs" "executor" "gateway" }}
{{- $v := index $.Values $name }}
{{- $grace := $v.terminationGracePeriodSeconds | default $.Values.terminationGracePeriodSeconds | int64 }}
{{- $sleep := $v.preStopSleepSeconds | default 0 | int64 }}
{{- if and (gt $sleep 0) (ge $sleep $grace) }}
{{- fail (printf "\n\n%s.preStopSleepSeconds (%d) must be less than its terminationGracePeriodSeconds (%d)." $name $sleep $grace) }}
{{- end }}
{{- end }}
{{- /* A stopping runs process lets experiments' replays end first, then stops (up to 10 s more). */}}
{{- $runsGrace := .Values.runs.terminationGracePeriodSeconds | default .Values.terminationGracePeriodSeconds | int64 }}
{{- $runsSleep := .Values.runs.preStopSleepSeconds | default 0 | int64 }}
{{- $experimentGrace := .Values.runs.experimentStopGraceSeconds | int64 }}
{{- if lt $runsGrace (add $runsSleep $experimentGrace 10) }}
{{- fail (printf "\n\nruns.terminationGracePeriodSeconds (%d) must be at least runs.preStopSleepSeconds (%d) + runs.experimentStopGraceSeconds (%d) + 10: the replays in flight end, then the process stops, before the SIGKILL." $runsGrace $runsSleep $experimentGrace) }}
{{- end }}
{{- if .Values.gateway.embedExecutor }}
{{- $executorPort := .Values.gateway.executorPort | default 0 | int64 }}
{{- if or (lt $executorPort 1) (gt $executorPort 65535) }}
{{- fail (printf "\n\ngateway.executorPort (%d) must be a port (1-65535) with gateway.embedExecutor: the runs service replays experiments through the edge's executor there." $executorPort) }}
{{- end }}
{{- if has $executorPort (list (.Values.gateway.port | int64) (.Values.gateway.probePort | default 0 | int64)) }}
{{- fail (printf "\n\ngateway.executorPort (%d) must differ from gateway.port and gateway.probePort." $executorPort) }}
{{- end }}
{{- end }}
{{- end }}
