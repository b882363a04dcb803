{{/*
pies.component renders one component: a Deployment and its Service.

Call with a dict:
  root        the top-level context ($)
  name        component name; also the key of its values (catalog, runs, executor, gateway)
  script      the entry point run by `node`, e.g. services/catalog/dist/main.js
  protocol    "grpc" (HTTP/2 cleartext, gRPC health probes) or "http" (HTTP/1.1, /healthz + /readyz)
  env         component-specific env entries, as a YAML list string (may be empty)
  usesSecret  true when the pods read the chart-created Secret: adds its checksum so they roll on change
  internalPort  optional (dict "name" … "port" …): a second port, gRPC/Connect over h2c, for pies'
              own processes only: on the component's Service when it is ClusterIP, else on a
              ClusterIP Service of its own, <fullname>-internal (a NodePort or LoadBalancer would
              publish it); pies.executorUrl names the same Service
*/}}
{{- define "pies.component" -}}
{{- $root := .root }}
{{- $name := .name }}
{{- $v := index $root.Values $name }}
{{- $grpc := eq .protocol "grpc" }}
{{- $portName := ternary "grpc" "http" $grpc }}
{{- $port := $v.port | int64 }}
{{- $labelCtx := dict "root" $root "component" $name }}
{{- $fullname := include "pies.componentName" (dict "root" $root "name" $name) }}
{{- $probes := mergeOverwrite (deepCopy $root.Values.probes) (deepCopy ($v.probes | default dict)) }}
{{- $annotations := merge (deepCopy ($v.podAnnotations | default dict)) (deepCopy ($root.Values.podAnnotations | default dict)) }}
{{- $secret := include (print $root.Template.BasePath "/secret.yaml") $root }}
{{- if and .usesSecret (trim $secret) }}
{{- $_ := set $annotations "checksum/secret" ($secret | sha256sum) }}
{{- end }}
{{- $podLabels := merge (deepCopy ($v.podLabels | default dict)) (deepCopy ($root.Values.podLabels | default dict)) }}
{{- $preStopSleep := $v.preStopSleepSeconds | default 0 | int64 }}
{{- /* An HTTP component with a probePort answers its probes there, from a thread of their own. */}}
{{- $probePort := ternary 0 ($v.probePort | default 0 | int64) $grpc }}
{{- $probePortName := ternary "probe" "http" (gt $probePort 0) }}
{{- /* A component with a metricsPort serves GET /metrics there over HTTP/1.1 (executor, runs). */}}
{{- $metricsPort := $v.metricsPort | default 0 | int64 }}
{{- $internal := .internalPort | default dict }}
{{- $svcType := ternary "ClusterIP" (dig "service" "type" "ClusterIP" $v) $grpc }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "pies.labels" $labelCtx | nindent 4 }}
spec:
  {{- if not (dig "autoscaling" "enabled" false $v) }}
  replicas: {{ $v.replicas | int64 }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "pies.selectorLabels" $labelCtx | nindent 6 }}
  template:
    metadata:
      {{- with $annotations }}
      annotations:
        {{- include "pies.stringMap" . | nindent 8 }}
      {{- end }}
      labels:
        {{- include "pies.labels" $labelCtx | nindent 8 }}
        {{- with $podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "pies.serviceAccountName" $root }}
      automountServiceAccountToken: false
      # No <SERVICE>_PORT variables: they would clash with the processes' own env (PIES_*, *_PORT).
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds | default $root.Values.terminationGracePeriodSeconds | int64 }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ $name }}
          image: {{ include "pies.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: ["node", {{ .script | quote }}]
          ports:
            - name: {{ $portName }}
              containerPort: {{ $port }}
              protocol: TCP
            {{- if gt $probePort 0 }}
            - name: probe
              containerPort: {{ $probePort }}
              protocol: TCP
            {{- end }}
            {{- if gt $metricsPort 0 }}
            - name: metrics
              containerPort: {{ $metricsPort }}
              protocol: TCP
            {{- end }}
            {{- with $internal }}
            - name: {{ .name }}
              containerPort: {{ .port | int64 }}
              protocol: TCP
            {{- end }}
          env:
            - name: PORT
              value: {{ $port | quote }}
            - name: HOST
              value: {{ $root.Values.listenHost | quote }}
            - name: LOG_LEVEL
              value: {{ $v.logLevel | default $root.Values.logLevel | quote }}
            {{- if gt $probePort 0 }}
            - name: PIES_PROBE_PORT
              value: {{ $probePort | quote }}
            {{- end }}
            {{- if gt $metricsPort 0 }}
            - name: PIES_METRICS_PORT
              value: {{ $metricsPort | quote }}
            {{- end }}
            {{- with $root.Values.tracing.otlpEndpoint }}
            - name: OTEL_EXPORTER_OTLP_ENDPOINT
              value: {{ . | quote }}
            - name: OTEL_TRACES_SAMPLER_RATIO
              value: {{ $root.Values.tracing.samplerRatio | quote }}
            {{- end }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $root.Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if $grpc }}
          # grpc.health.v1.Health: service "" is SERVING while the process is up;
          # service "readiness" only while PostgreSQL / NATS / peers are reachable.
          startupProbe:
            grpc:
              port: {{ $port }}
            {{- toYaml $probes.startup | nindent 12 }}
          livenessProbe:
            grpc:
              port: {{ $port }}
            {{- toYaml $probes.liveness | nindent 12 }}
          readinessProbe:
            grpc:
              port: {{ $port }}
              service: readiness
            {{- toYaml $probes.readiness | nindent 12 }}
          {{- else }}
          startupProbe:
            httpGet:
              path: /healthz
              port: {{ $probePortName }}
            {{- toYaml $probes.startup | nindent 12 }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: {{ $probePortName }}
            {{- toYaml $probes.liveness | nindent 12 }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: {{ $probePortName }}
            {{- toYaml $probes.readiness | nindent 12 }}
          {{- end }}
          {{- if gt $preStopSleep 0 }}
          lifecycle:
            # Keep serving while endpoints and proxies drop this pod, then SIGTERM. Uses node rather
            # than `sleep`, which the image may not have.
            preStop:
              exec:
                command: ["node", "-e", "setTimeout(() => {}, {{ mul $preStopSleep 1000 }})"]
          {{- end }}
          {{- with $v.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $root.Values.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: {{ $root.Values.tmpSizeLimit | default "64Mi" }}
      {{- with $v.nodeSelector | default $root.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations | default $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity | default $root.Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "pies.labels" $labelCtx | nindent 4 }}
  {{- with dig "service" "annotations" dict $v }}
  annotations:
    {{- include "pies.stringMap" . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $svcType }}
  selector:
    {{- include "pies.selectorLabels" $labelCtx | nindent 4 }}
  ports:
    - name: {{ $portName }}
      {{- if $grpc }}
      # Peers dial http://<name>:<port>, so the Service port equals the container port.
      port: {{ $port }}
      appProtocol: kubernetes.io/h2c
      {{- else }}
      port: {{ dig "service" "port" $port $v | int64 }}
      appProtocol: http
      {{- $nodePort := dig "service" "nodePort" nil $v }}
      {{- if and $nodePort (has (dig "service" "type" "ClusterIP" $v) (list "NodePort" "LoadBalancer")) }}
      nodePort: {{ $nodePort | int64 }}
      {{- end }}
      {{- end }}
      targetPort: {{ $portName }}
      protocol: TCP
    {{- if and $internal (eq $svcType "ClusterIP") }}
    {{- include "pies.internalServicePort" $internal | nindent 4 }}
    {{- end }}
{{- if and $internal (ne $svcType "ClusterIP") }}
---
# {{ $internal.name }}: for pies' own processes, kept off the {{ $svcType }} above.
apiVersion: v1
kind: Service
metadata:
  name: {{ include "pies.componentName" (dict "root" $root "name" (printf "%s-internal" $name)) }}
  labels:
    {{- include "pies.labels" $labelCtx | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "pies.selectorLabels" $labelCtx | nindent 4 }}
  ports:
    {{- include "pies.internalServicePort" $internal | nindent 4 }}
{{- end }}
{{- end }}

{{/* A Service port for pies' own processes (internalPort of pies.component). */}}
{{- define "pies.internalServicePort" -}}
- name: {{ .name }}
  # Peers dial http://<name>:<port>, so the Service port equals the container port.
  port: {{ .port | int64 }}
  appProtocol: kubernetes.io/h2c
  targetPort: {{ .name }}
  protocol: TCP
{{- end }}
