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

{{/*
GOMEMLIMIT from a container's memory limit: the limit less what Go does not
count against it but the container is charged for (the binary's resident
pages, ~50 MiB for a shard, goroutine stacks, the runtime's own): a tenth
of the limit, at least 64 MiB, in whole MiB. Empty without a limit (Go's
default: no soft limit). Called with (dict "limit" <the limit> "name" <its
values path> "or" <", or ..." another way out, if any>); a limit it cannot
read, or one that leaves Go less than 64 MiB, fails naming the value.
*/}}
{{- define "shardsched.goMemLimitFrom" -}}
{{- $v := .limit -}}
{{- if not (kindIs "invalid" $v) -}}
{{- $s := toString $v -}}
{{- if or (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v) -}}
{{- $s = toString (int64 $v) -}}
{{- end -}}
{{- if $s -}}
{{- if not (regexMatch "^[0-9]{1,15}(Ki|Mi|Gi|Ti|k|M|G|T)?$" $s) -}}
{{- fail (printf "%s: %q is not a memory size the chart reads to set GOMEMLIMIT (a whole number, alone or followed by Ki, Mi, Gi, Ti, k, M, G or T, e.g. 4Gi or 1536Mi); write it so%s" .name $s (.or | default "")) -}}
{{- end -}}
{{- $digits := regexFind "^[0-9]+" $s -}}
{{- $unit := get (dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0) (trimPrefix $digits $s) -}}
{{- $mib := int64 (floor (divf (mulf (float64 $digits) $unit) 1048576.0)) -}}
{{- $keep := max 64 (div $mib 10) -}}
{{- $go := sub $mib $keep -}}
{{- if lt $go 64 -}}
{{- fail (printf "%s: %s leaves Go less than 64 MiB once %d MiB is kept for what it does not count (the binary's pages, stacks): raise it%s" .name $s $keep (.or | default "")) -}}
{{- end -}}
{{- printf "%dMiB" $go -}}
{{- end -}}
{{- end -}}
{{- end -}}
