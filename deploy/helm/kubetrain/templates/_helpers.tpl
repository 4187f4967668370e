{{- define "kubetrain.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubetrain.serviceAccountName" -}}
{{- default (include "kubetrain.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kubetrain.labels" -}}
app.kubernetes.io/name: kubetrain-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kubetrain.selectorLabels" -}}
app.kubernetes.io/name: kubetrain-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
