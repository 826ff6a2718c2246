{{- define "llmsim-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "llmsim-operator.serviceAccountName" -}}
{{- default (include "llmsim-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "llmsim-operator.selectorLabels" -}}
app.kubernetes.io/name: llmsim-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "llmsim-operator.labels" -}}
{{ include "llmsim-operator.selectorLabels" . }}
app.kubernetes.io/part-of: llmsim
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
