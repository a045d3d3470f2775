{{/*
Object names are fixed (one release per cluster), as in deploy/base; the namespace is the
release's.
*/}}
{{- define "node-ipam-lb.name" -}}
node-ipam-lb
{{- end }}

{{/* Labels on every object: deploy/base's two, plus Helm's own. */}}
{{- define "node-ipam-lb.labels" -}}
app.kubernetes.io/name: node-ipam-lb
app.kubernetes.io/part-of: node-ipam-lb
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The Pods' selector (as deploy/base: stable across upgrades). */}}
{{- define "node-ipam-lb.selectorLabels" -}}
app.kubernetes.io/name: node-ipam-lb
{{- end }}

{{- define "node-ipam-lb.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
Settings the chart wires itself (explicit env entries in deployment.yaml, or always null
by values.schema.json); the rest become NODE_IPAM_<NAME> when not null.
*/}}
{{- define "node-ipam-lb.wiredSettings" -}}
kubeconfig port health-probe-bind-address tls-cert-file tls-private-key-file ca-bundle-out leader-elect leader-election-namespace leader-election-id cert-secret-name cert-secret-namespace webhook-service-name webhook-configuration-name shutdown-delay-seconds
{{- end }}

{{/*
A setting's value as its environment variable's text: strings as they are, numbers and
booleans as JSON (values arrive as float64: 8388608 stays 8388608, not 8.388608e+06).
*/}}
{{- define "node-ipam-lb.envValue" -}}
{{- if kindIs "string" . -}}
{{ . }}
{{- else -}}
{{ toJson . }}
{{- end -}}
{{- end }}

{{- define "node-ipam-lb.envName" -}}
NODE_IPAM_{{ . | upper | replace "-" "_" }}
{{- end }}

{{- define "node-ipam-lb.selfManaged" -}}
{{- if eq .Values.certificates.mode "self-managed" }}true{{ end -}}
{{- end }}

{{/*
The port of settings.health-probe-bind-address (host:port, :port or [v6]:port), the
container port the probes use; validate.yaml rejects 0 (disabled) and port 0.
*/}}
{{- define "node-ipam-lb.healthProbePort" -}}
{{- index .Values.settings "health-probe-bind-address" | toString | splitList ":" | last }}
{{- end }}
