{{/* Names and labels. */}}
{{- define "effectively.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "effectively.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "effectively.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "effectively.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "effectively.selectorLabels" -}}
app.kubernetes.io/name: {{ include "effectively.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "effectively.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "effectively.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: effectively
{{- end -}}

{{- define "effectively.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "effectively.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "effectively.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Where secrets and the configuration file are mounted in the containers. */}}
{{- define "effectively.configDir" -}}/etc/effectively/config{{- end -}}
{{- define "effectively.postgresPasswordDir" -}}/etc/effectively/secrets/postgres{{- end -}}
{{- define "effectively.postgresCADir" -}}/etc/effectively/secrets/postgres-ca{{- end -}}
{{- define "effectively.kafkaTLSDir" -}}/etc/effectively/secrets/kafka-tls{{- end -}}
{{- define "effectively.kafkaSASLDir" -}}/etc/effectively/secrets/kafka-sasl{{- end -}}

{{/*
postgres.url for a role: no password in it (postgres.password_file carries
that), sslrootcert pointing at the mounted CA when one is given.
*/}}
{{- define "effectively.postgresURL" -}}
{{- $pg := .root.Values.postgres -}}
{{- $url := printf "postgres://%s@%s:%v/%s?sslmode=%s" (urlquery .user) $pg.host $pg.port $pg.database $pg.sslmode -}}
{{- if $pg.tls.existingSecret -}}
{{- $url = printf "%s&sslrootcert=%s/ca.crt" $url (include "effectively.postgresCADir" .root) -}}
{{- end -}}
{{- $url -}}
{{- end -}}

{{/* The PostgreSQL environment and mounts shared by the worker and the migrate Job. */}}
{{- define "effectively.postgresEnv" -}}
- name: EFFECTIVELY_POSTGRES_URL
  value: {{ include "effectively.postgresURL" (dict "root" .root "user" .role.user) | quote }}
- name: EFFECTIVELY_POSTGRES_PASSWORD_FILE
  value: {{ printf "%s/password" (include "effectively.postgresPasswordDir" .root) | quote }}
{{- end -}}

{{- define "effectively.postgresVolumeMounts" -}}
- name: postgres-password
  mountPath: {{ include "effectively.postgresPasswordDir" .root }}
  readOnly: true
{{- if .root.Values.postgres.tls.existingSecret }}
- name: postgres-ca
  mountPath: {{ include "effectively.postgresCADir" .root }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "effectively.postgresVolumes" -}}
- name: postgres-password
  secret:
    secretName: {{ required "postgres: the role's existingSecret (a Secret holding its password) is required" .role.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .role.passwordKey }}
        path: password
{{- if .root.Values.postgres.tls.existingSecret }}
- name: postgres-ca
  secret:
    secretName: {{ .root.Values.postgres.tls.existingSecret }}
    defaultMode: 0444
    items:
      - key: {{ .root.Values.postgres.tls.caKey }}
        path: ca.crt
{{- end }}
{{- end -}}

{{/* SASL mechanisms that take a password (the others: none, oauthbearer). */}}
{{- define "effectively.saslUsesPassword" -}}
{{- if has (.Values.kafka.sasl.mechanism | lower | replace "_" "-") (list "plain" "scram-sha-256" "scram-sha-512") -}}true{{- end -}}
{{- end -}}

{{/* kafka.leave_on_shutdown: the value, or on exactly when KEDA scales the group. */}}
{{- define "effectively.leaveOnShutdown" -}}
{{- if eq (toString .Values.kafka.leaveOnShutdown) "" -}}
{{- .Values.keda.enabled -}}
{{- else -}}
{{- .Values.kafka.leaveOnShutdown -}}
{{- end -}}
{{- end -}}

{{/*
GOMEMLIMIT: goMemLimit when set; otherwise goMemLimitPercent of
resources.limits.memory, rounded down to MiB (Go's syntax, e.g. 326MiB);
empty when neither gives one. The limit is a Kubernetes quantity: a plain
number of bytes, or one with a decimal (k, M, G, T, P) or binary (Ki, Mi,
Gi, Ti, Pi) suffix.
*/}}
{{- define "effectively.goMemLimit" -}}
{{- if .Values.goMemLimit -}}
{{- .Values.goMemLimit -}}
{{- else -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) -}}
{{- $pct := .Values.goMemLimitPercent | default 0 | int -}}
{{- if and $limit (gt $pct 0) -}}
{{- $bytes := 0.0 -}}
{{- if or (kindIs "float64" $limit) (kindIs "int" $limit) (kindIs "int64" $limit) -}}
{{- $bytes = float64 $limit -}}
{{- else -}}
{{- $q := toString $limit -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $num $q -}}
{{- $units := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 -}}
{{- if or (not $num) (not (hasKey $units $unit)) -}}
{{- fail (printf "resources.limits.memory %q: the chart derives GOMEMLIMIT from it and reads a number of bytes with an optional k, M, G, T, P, Ki, Mi, Gi, Ti or Pi suffix; write it so, or set goMemLimit (or goMemLimitPercent: 0)" $q) -}}
{{- end -}}
{{- $bytes = mulf (float64 $num) (get $units $unit) -}}
{{- end -}}
{{- $mib := divf (mulf $bytes $pct) 104857600.0 | floor | int64 -}}
{{- if lt $mib 1 -}}
{{- fail (printf "resources.limits.memory %v leaves a GOMEMLIMIT under 1 MiB (goMemLimitPercent %d): the worker needs far more (see docs/operations/capacity.md#memory)" $limit $pct) -}}
{{- end -}}
{{- printf "%dMiB" $mib -}}
{{- end -}}
{{- end -}}
{{- end -}}
