{{/*
The chart's name and version, as the helm.sh/chart label holds them.
*/}}
{{- define "ome-resources.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The labels Helm's own tooling expects, added to every object's labels (and the pod
template's) next to the labels of config/, which are kept as they are. Never on the
Deployment's selector: a selector cannot change once the Deployment exists.
*/}}
{{- define "ome-resources.labels" -}}
helm.sh/chart: {{ include "ome-resources.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Cluster-scoped names start with the release's name, so that a second release (in another
namespace) does not collide with the first; with the walkthrough's release name, ome, they are
config/'s names: ome-manager-role, ome-manager-rolebinding, ome-inferencereplica-webhook.
Names in the release's namespace are config/'s as they are.
*/}}
{{- define "ome-resources.clusterRoleName" -}}
{{- printf "%s-manager-role" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ome-resources.clusterRoleBindingName" -}}
{{- printf "%s-manager-rolebinding" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The metrics endpoint's (metrics.secure): the ClusterRole scrapers are bound to (get on
/metrics), and the ClusterRole, with its binding, that lets the manager check their tokens
(TokenReviews, SubjectAccessReviews). ome-metrics-reader, ome-metrics-auth-role and
ome-metrics-auth-rolebinding for the release ome, as in config/rbac.
*/}}
{{- define "ome-resources.metricsReaderName" -}}
{{- printf "%s-metrics-reader" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ome-resources.metricsAuthRoleName" -}}
{{- printf "%s-metrics-auth-role" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ome-resources.metricsAuthRoleBindingName" -}}
{{- printf "%s-metrics-auth-rolebinding" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The manager's metrics port (metrics.port, 8443 by default), where --metrics-bind-address
binds and the metrics Service sends scrapes.
*/}}
{{- define "ome-resources.metricsPort" -}}
{{- dig "metrics" "port" 8443 .Values.AsMap | int }}
{{- end }}

{{/*
"true" when the manager serves its metrics over HTTPS to authenticated and authorized
scrapers only (metrics.secure, the default), else empty: plain HTTP to anyone
(--metrics-secure=false). Only an explicit false turns it off.
*/}}
{{- define "ome-resources.metricsSecure" -}}
{{- if not (eq (dig "metrics" "secure" true .Values.AsMap) false) }}true{{ end }}
{{- end }}

{{/*
The ValidatingWebhookConfiguration, which the manager's --webhook-config-name names and the
ClusterRole lets it get and update (its caBundle).
*/}}
{{- define "ome-resources.webhookConfigName" -}}
{{- printf "%s-inferencereplica-webhook" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The tpuSliceProvisioning entry of the inferenceservice-config ConfigMap: the value as
compact JSON (toJson: keys sorted, no spaces), or a string value as the JSON text it is;
empty when the value is unset, null, {} or "" (no entry then).
*/}}
{{- define "ome-resources.tpuSliceProvisioning" -}}
{{- $block := "" }}
{{- with .Values.ome }}{{ with .controller }}{{ $block = .tpuSliceProvisioning }}{{ end }}{{ end }}
{{- if $block }}
{{- if kindIs "string" $block }}{{ $block }}{{ else }}{{ toJson $block }}{{ end }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount the manager runs as, and the RoleBindings and ClusterRoleBinding bind:
serviceAccount.name, or config/'s ome-controller-manager; the chart creates it unless
serviceAccount.create is false.
*/}}
{{- define "ome-resources.serviceAccountName" -}}
{{- dig "serviceAccount" "name" "" .Values.AsMap | default "ome-controller-manager" }}
{{- end }}

{{/*
"true" when cert-manager issues the webhook's certificate (webhook.certManager.enabled),
else empty: then the manager manages its own.
*/}}
{{- define "ome-resources.certManager" -}}
{{- if dig "webhook" "certManager" "enabled" false .Values.AsMap }}true{{ end }}
{{- end }}

{{/*
The cert-manager Certificate of the webhook's serving certificate; the
ValidatingWebhookConfiguration's cert-manager.io/inject-ca-from names it.
*/}}
{{- define "ome-resources.certificateName" -}}
ome-serving-cert
{{- end }}
