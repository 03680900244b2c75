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

{{/* The in-chart Redis's resource name (its Deployment, Service and Secret). */}}
{{- define "completiond.redisName" -}}
{{- printf "%s-redis" (include "completiond.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The in-chart Redis's selector labels: never the server's, so that neither its Service nor its PodDisruptionBudget selects the Redis pod. */}}
{{- define "completiond.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "completiond.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "completiond.redisLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "completiond.redisSelectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Redis URL the server gets (COMPLETIOND_REDIS_URL), or "" when the chart passes none. */}}
{{- define "completiond.redisURL" -}}
{{- if .Values.redis.inChart.enabled }}
{{- printf "redis://%s.%s.svc:6379/0" (include "completiond.redisName" .) .Release.Namespace }}
{{- else }}
{{- .Values.redis.url }}
{{- end }}
{{- end }}

{{/* The Secret of the Redis password, or "" for a Redis without one. */}}
{{- define "completiond.redisPasswordSecret" -}}
{{- if .Values.redis.inChart.enabled }}
{{- include "completiond.redisName" . }}
{{- else }}
{{- .Values.redis.password.existingSecret }}
{{- end }}
{{- end }}

{{- define "completiond.redisPasswordKey" -}}
{{- if .Values.redis.inChart.enabled }}redis-password{{ else }}{{ .Values.redis.password.existingSecretKey }}{{ end }}
{{- end }}

{{/* Whether the replicas share a Redis: the chart's URL, its own Redis, or the config file's redis section. */}}
{{- define "completiond.hasRedis" -}}
{{- $configRedis := .Values.redis.inConfig }}
{{- if kindIs "map" .Values.config }}
{{- $configRedis = or $configRedis (hasKey .Values.config "redis") }}
{{- else if kindIs "string" .Values.config }}
{{- $configRedis = or $configRedis (regexMatch "(?m)^redis:" .Values.config) }}
{{- end }}
{{- if or .Values.redis.url .Values.redis.inChart.enabled $configRedis }}true{{- end }}
{{- end }}

{{/* Refuses to render a fleet without Redis: each replica would keep its completions to itself, and a caller's reconnect through the Service would find nothing on another pod (NOT_FOUND). Refuses a Redis password in plain values. */}}
{{- define "completiond.checkFleet" -}}
{{- $most := int .Values.replicaCount }}
{{- $what := printf "replicaCount=%d" $most }}
{{- if .Values.autoscaling.enabled }}
{{- $most = int .Values.autoscaling.maxReplicas }}
{{- $what = printf "autoscaling.maxReplicas=%d" $most }}
{{- end }}
{{- if and (gt $most 1) (not (include "completiond.hasRedis" .)) }}
{{- fail (printf "%s needs Redis: set redis.url (and redis.password.existingSecret), redis.inChart.enabled=true to try it out, or redis.inConfig=true when the config file has redis.url; without one, a caller's Attach or Session resume through the Service lands on another replica and gets NOT_FOUND" $what) }}
{{- end }}
{{- if and .Values.redis.url .Values.redis.inChart.enabled }}
{{- fail "redis.url and redis.inChart.enabled=true: choose one Redis" }}
{{- end }}
{{- if and .Values.redis.cluster .Values.redis.inChart.enabled }}
{{- fail "redis.cluster=true with redis.inChart.enabled=true: the in-chart Redis is one node, not a Cluster" }}
{{- end }}
{{- if regexMatch "^[a-z]+://[^/@]*:[^/@]*@" .Values.redis.url }}
{{- fail "redis.url holds a password: put it in a Secret and name it in redis.password.existingSecret (the URL is a plain environment variable of the pod)" }}
{{- end }}
{{- end }}
