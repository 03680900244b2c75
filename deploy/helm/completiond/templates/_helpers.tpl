{{/* The chart's name, or nameOverride. */}}
{{- define "completiond.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resource name: fullnameOverride, or <release>-<name> (the release alone when it contains the name). */}}
{{- define "completiond.fullname" -}}
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

{{- define "completiond.selectorLabels" -}}
app.kubernetes.io/name: {{ include "completiond.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "completiond.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "completiond.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "completiond.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "completiond.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "completiond.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Whether the config comes from a file: the chart's ConfigMap or the user's. */}}
{{- define "completiond.hasConfig" -}}
{{- if or .Values.config .Values.existingConfigMap }}true{{- end }}
{{- end }}

{{- define "completiond.configMapName" -}}
{{- .Values.existingConfigMap | default (printf "%s-config" (include "completiond.fullname" .)) }}
{{- end }}

{{/* The Secret of the callers' API key, or "" without one. */}}
{{- define "completiond.apiKeySecret" -}}
{{- $k := .Values.auth.apiKey }}
{{- if $k.existingSecret }}
{{- $k.existingSecret }}
{{- else if or $k.value $k.generate }}
{{- printf "%s-api-key" (include "completiond.fullname" .) }}
{{- end }}
{{- end }}

{{- define "completiond.apiKeySecretKey" -}}
{{- if .Values.auth.apiKey.existingSecret }}{{ .Values.auth.apiKey.existingSecretKey }}{{ else }}api-key{{ end }}
{{- end }}

{{/* The Secret of providerKeys, or "". */}}
{{- define "completiond.providerSecret" -}}
{{- if .Values.providerKeys.existingSecret }}
{{- .Values.providerKeys.existingSecret }}
{{- else if .Values.providerKeys.values }}
{{- printf "%s-providers" (include "completiond.fullname" .) }}
{{- end }}
{{- end }}

{{/* Shutdown takes at most preStop + drain + grace seconds. */}}
{{- define "completiond.shutdownSeconds" -}}
{{- $s := .Values.shutdown }}
{{- add (int $s.preStopSleepSeconds) (int $s.drainTimeoutSeconds) (int $s.shutdownGraceSeconds) }}
{{- end }}

{{- define "completiond.terminationGracePeriodSeconds" -}}
{{- $min := int (include "completiond.shutdownSeconds" .) }}
{{- if .Values.terminationGracePeriodSeconds }}
{{- $t := int .Values.terminationGracePeriodSeconds }}
{{- if le $t $min }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed shutdown.preStopSleepSeconds + drainTimeoutSeconds + shutdownGraceSeconds (%d), or the kubelet kills streams still draining" $t $min) }}
{{- end }}
{{- $t }}
{{- else }}
{{- add $min 5 }}
{{- end }}
{{- end }}

{{/* Refuses to render a server that would refuse to start: no authentication on the pod's address. */}}
{{- define "completiond.checkAuth" -}}
{{- $configAuth := false }}
{{- if kindIs "map" .Values.config }}
{{- $configAuth = hasKey .Values.config "auth" }}
{{- else if kindIs "string" .Values.config }}
{{- $configAuth = regexMatch "(?m)^auth:" .Values.config }}
{{- end }}
{{- if not (or .Values.auth.insecureNoAuth (include "completiond.apiKeySecret" .) $configAuth .Values.existingConfigMap) }}
{{- fail "no authentication: set auth.apiKey (existingSecret, value or generate), auth.keys in config, or auth.insecureNoAuth=true when the network in front of the pods authenticates" }}
{{- end }}
{{- if and .Values.auth.insecureNoAuth (include "completiond.apiKeySecret" .) }}
{{- fail "auth.insecureNoAuth=true with an API key: set auth.apiKey.generate=false (and no value or existingSecret), or leave authentication on" }}
{{- end }}
{{- end }}
