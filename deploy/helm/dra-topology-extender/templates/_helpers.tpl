{{/*
Names are fixed (one release per cluster): the scheduler profile and the Service name are what
pods and the scheduler configuration refer to, and the ClusterRole is cluster-wide anyway.
*/}}
{{- define "dra.extender" -}}dra-topology-extender{{- end }}
{{- define "dra.scheduler" -}}dra-topology-scheduler{{- end }}

{{/* The Service's DNS name: the extender's serving certificate must carry it. */}}
{{- define "dra.serviceHost" -}}
{{ include "dra.extender" . }}.{{ .Release.Namespace }}.svc
{{- end }}

{{/* The labels Helm's conventions add to every object (metadata only, never selectors). */}}
{{- define "dra.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "dra.extenderLabels" -}}
app.kubernetes.io/name: {{ include "dra.extender" . }}
{{ include "dra.helmLabels" . }}
{{- end }}

{{- define "dra.schedulerLabels" -}}
app.kubernetes.io/name: {{ include "dra.scheduler" . }}
{{ include "dra.helmLabels" . }}
{{- end }}

{{- define "dra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* "true" when the extender binds (and so writes claims): allocator and both modes. */}}
{{- define "dra.binds" -}}
{{- if ne .Values.mode "advisory" }}true{{ end -}}
{{- end }}

{{/*
Combinations of values that are each valid but cannot work together. Included once, from the
extender's Deployment, so that every rendering checks them.
*/}}
{{- define "dra.validate" -}}
{{- if and (eq .Values.mode "both") .Values.secondScheduler.enabled -}}
{{- fail "mode both is the configuration of the cluster's own kube-scheduler (it schedules default-scheduler pods too): set secondScheduler.enabled=false, or use mode allocator for a second scheduler" -}}
{{- end -}}
{{- if and (include "dra.binds" .) (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "mode %s with %d replicas needs leaderElection.enabled=true: only the Lease holder may bind (or set replicas=1)" .Values.mode (int .Values.replicas)) -}}
{{- end -}}
{{- if and .Values.tls.clientAuth (not .Values.tls.enabled) -}}
{{- fail "tls.clientAuth=true needs tls.enabled=true (client certificates are checked in the TLS handshake)" -}}
{{- end -}}
{{- $managed := dict
  "kube" "the chart always runs in kube mode"
  "kubeconfig" "the pod uses its service account"
  "statePaths" "the chart always runs in kube mode"
  "listenHost" "the chart serves on 0.0.0.0:8443"
  "listenPort" "the chart serves on 0.0.0.0:8443"
  "tlsCertFile" "use tls.enabled and tls.secretName"
  "tlsKeyFile" "use tls.enabled and tls.secretName"
  "clientCaFile" "use tls.clientAuth"
  "leaderElect" "use leaderElection.enabled"
  "leaderLeaseNamespace" "the Lease is in the release namespace, where the chart's Role allows it"
  "kubernetesVersion" "use kubernetesVersion"
  "ui" "use ui"
  "tracing" "use tracing.otlpEndpoint"
  "otlpEndpoint" "use tracing.otlpEndpoint"
  "otlpProtocol" "use tracing.protocol"
  "logJson" "the chart logs JSON"
  "kernelThreads" "use kernelThreads"
  "schedulerNames" "the chart sets it from mode"
-}}
{{- range $key := keys .Values.settings | sortAlpha -}}
{{- $camel := camelcase $key | untitle -}}
{{- if hasKey $managed $camel -}}
{{- fail (printf "settings.%s is set by the chart: %s" $key (get $managed $camel)) -}}
{{- end -}}
{{- end -}}
{{- end }}
