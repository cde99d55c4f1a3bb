{{/*
The namespace every object goes to. The generated Roles (templates/rbac)
name causeway-system, so the chart refuses any other.
*/}}
{{- define "causeway.namespace" -}}
{{- if ne .Release.Namespace "causeway-system" -}}
{{- fail (printf "the chart installs into namespace causeway-system only (its generated Roles name it), not %q: use --namespace causeway-system" .Release.Namespace) -}}
{{- end -}}
causeway-system
{{- end -}}

{{/* Labels of a component's objects; the selector labels are the first two. */}}
{{- define "causeway.selectorLabels" -}}
app.kubernetes.io/part-of: causeway
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "causeway.labels" -}}
{{ include "causeway.selectorLabels" .component }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end -}}

{{- define "causeway.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The tunnel's UDP port: cable.port, or the driver's. */}}
{{- define "causeway.cablePort" -}}
{{- if .Values.cable.port -}}
{{ .Values.cable.port }}
{{- else -}}
{{ get (dict "wireguard" 4500 "vxlan" 4789 "ipsec" 500) .Values.cable.driver }}
{{- end -}}
{{- end -}}

{{/* The tunnel MTU the route agents clamp TCP MSS to: cable.mtu, or the driver's. */}}
{{- define "causeway.tunnelMTU" -}}
{{- if .Values.cable.mtu -}}
{{ .Values.cable.mtu }}
{{- else -}}
{{ get (dict "wireguard" 1420 "vxlan" 1450 "ipsec" 1400) .Values.cable.driver }}
{{- end -}}
{{- end -}}

{{/* Environment every daemon reads: its node and this cluster's config. */}}
{{- define "causeway.env" -}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
- name: CLUSTER_ID
  valueFrom: {configMapKeyRef: {name: causeway-config, key: cluster-id}}
- name: POD_CIDRS
  valueFrom: {configMapKeyRef: {name: causeway-config, key: pod-cidrs}}
- name: SERVICE_CIDRS
  valueFrom: {configMapKeyRef: {name: causeway-config, key: service-cidrs}}
{{- end -}}

{{/* Liveness and readiness on the daemon's health port. Liveness allows a
minute of unanswered probes (5 s each): on a node whose CPUs are
saturated, Kubernetes' default (1 s, 3 failures) restarts a busy daemon,
and the restart (a full resync) adds to the load. */}}
{{- define "causeway.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: {{ . }}}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
readinessProbe:
  httpGet: {path: /readyz, port: {{ . }}}
  periodSeconds: 5
  timeoutSeconds: 5
{{- end -}}

{{/* A config checksum as a Pod annotation: a changed config rolls the Pods. */}}
{{- define "causeway.configChecksum" -}}
causeway.dev/config-checksum: {{ include (print .Template.BasePath "/config.yaml") . | sha256sum }}
{{- end -}}

{{/*
The --metrics-addr of a host-network daemon (its values): 127.0.0.1, or
the node's address (HOST_IP, status.hostIP) with metricsBind "node".
*/}}
{{- define "causeway.hostMetricsAddr" -}}
{{- if eq .metricsBind "node" -}}
$(HOST_IP):{{ .metricsPort }}
{{- else -}}
127.0.0.1:{{ .metricsPort }}
{{- end -}}
{{- end -}}
