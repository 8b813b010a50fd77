{{/* The release's objects are named after it: install as "shardsched". */}}
{{- define "shardsched.fullname" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "shardsched.labels" -}}
app.kubernetes.io/part-of: shardsched
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "shardsched.shardSelector" -}}
app.kubernetes.io/name: shardsched
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: shard
{{- end -}}

{{- define "shardsched.etcdSelector" -}}
app.kubernetes.io/name: etcd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator-store
{{- end -}}

{{- define "shardsched.etcdName" -}}
{{- printf "%s-etcd" (include "shardsched.fullname" .) -}}
{{- end -}}

{{- define "shardsched.coordinatorSecret" -}}
{{- .Values.coordinator.existingSecret | default (printf "%s-coordinator-token" (include "shardsched.fullname" .)) -}}
{{- end -}}

{{- define "shardsched.gossipSecret" -}}
{{- .Values.gossip.existingSecret | default (printf "%s-gossip-key" (include "shardsched.fullname" .)) -}}
{{- end -}}

{{/* The etcd endpoints the shards use: the chart's members or the external ones. */}}
{{- define "shardsched.etcdEndpoints" -}}
{{- if .Values.etcd.enabled -}}
{{- $name := include "shardsched.etcdName" . -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $eps = append $eps (printf "http://%s-%d.%s.%s.svc:2379" $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $eps -}}
{{- else -}}
{{- required "externalEtcd.endpoints is required when etcd.enabled is false" (join "," .Values.externalEtcd.endpoints) -}}
{{- end -}}
{{- end -}}
