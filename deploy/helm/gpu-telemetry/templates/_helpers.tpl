{{/*
Labels every object of the release carries besides its own (which are those of deploy/):
the chart, the release and Helm. The comparison with deploy/ (docs/deploy.md, "Helm")
leaves exactly these three out.
*/}}
{{- define "gpu-telemetry.release-labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of an exporter object ("attribution" or "health" component, or none). */}}
{{- define "gpu-telemetry.exporter-labels" -}}
app.kubernetes.io/name: gpu-exporter
app.kubernetes.io/part-of: gpu-telemetry
{{ include "gpu-telemetry.release-labels" . }}
{{- end }}

{{- define "gpu-telemetry.adapter-labels" -}}
app.kubernetes.io/name: gpu-metrics-adapter
app.kubernetes.io/part-of: gpu-telemetry
{{ include "gpu-telemetry.release-labels" . }}
{{- end }}

{{- define "gpu-telemetry.kubectl-gpu-labels" -}}
app.kubernetes.io/name: kubectl-gpu
app.kubernetes.io/part-of: gpu-telemetry
{{ include "gpu-telemetry.release-labels" . }}
{{- end }}

{{/* image: repository:tag, the tag defaulting to the chart's appVersion. Arg: (list $ .Values.x.image) */}}
{{- define "gpu-telemetry.image" -}}
{{- $top := index . 0 -}}
{{- $image := index . 1 -}}
{{- printf "%s:%s" $image.repository (default $top.Chart.AppVersion $image.tag) -}}
{{- end }}

{{/* The adapter's Service DNS names, short to long. */}}
{{- define "gpu-telemetry.adapter-hosts" -}}
gpu-metrics-adapter,gpu-metrics-adapter.{{ .Release.Namespace }},gpu-metrics-adapter.{{ .Release.Namespace }}.svc,gpu-metrics-adapter.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}

{{/* The APIServices whose caBundle the adapter (or cert-manager) writes. */}}
{{- define "gpu-telemetry.apiservices" -}}
v1beta1.custom.metrics.k8s.io,v1beta2.custom.metrics.k8s.io,v1beta1.external.metrics.k8s.io
{{- end }}

{{/*
Cross-field rules the schema cannot word clearly: each failure names the values at fault.
*/}}
{{- define "gpu-telemetry.validate" -}}
{{- $v := .Values -}}
{{- if and $v.exporter.dcgmExporterService.enabled (eq $v.exporter.naming "native") -}}
{{- fail "exporter.dcgmExporterService.enabled=true needs exporter.naming=both (or dcgm-exporter): the Service stands in for dcgm-exporter, whose metric names the native naming does not serve" -}}
{{- end -}}
{{- if and $v.adapter.podDisruptionBudget.enabled (hasKey $v.adapter.podDisruptionBudget "minAvailable") (hasKey $v.adapter.podDisruptionBudget "maxUnavailable") -}}
{{- if and (not (kindIs "invalid" $v.adapter.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" $v.adapter.podDisruptionBudget.maxUnavailable)) -}}
{{- fail "adapter.podDisruptionBudget: set minAvailable or maxUnavailable, not both (set the other to null)" -}}
{{- end -}}
{{- end -}}
{{- if and $v.adapter.rules.existing (or $v.adapter.rules.custom $v.adapter.rules.external) -}}
{{- fail "adapter.rules.existing names a ConfigMap used instead of rules.default, custom and external: leave custom and external empty with it" -}}
{{- end -}}
{{- end }}
