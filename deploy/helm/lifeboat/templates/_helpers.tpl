{{/* The chart's name, or nameOverride. */}}
{{- define "lifeboat.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' base name: fullnameOverride, or the release name when it
contains the chart's name, else RELEASE-lifeboat. */}}
{{- define "lifeboat.fullname" -}}
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

{{- define "lifeboat.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lifeboat.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "lifeboat.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lifeboat.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lifeboat
{{- end }}

{{- define "lifeboat.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lifeboat.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "lifeboat.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "true" when the agent keeps its Kubernetes objects (kubernetesObjects):
every mode but fleet, whose hub runs no jobs of a cluster. */}}
{{- define "lifeboat.kubeObjects" -}}
{{- if and .Values.kubernetesObjects.enabled (ne .Values.mode "fleet") }}true{{ end }}
{{- end }}

{{/* Refuses values that cannot work, with the value's path. */}}
{{- define "lifeboat.validate" -}}
{{- if and .Values.capture.enabled (ne .Values.mode "deployment") }}
{{- fail "capture.enabled: continuous capture needs mode: deployment (a CronJob's agent --once cannot capture; lifeboat refuses it too)" }}
{{- end }}
{{- if hasKey (.Values.config.capture | default dict) "enabled" }}
{{- fail "config.capture.enabled: set capture.enabled instead (the chart checks it against the mode)" }}
{{- end }}
{{- if .Values.config.kubernetes }}
{{- fail "config.kubernetes: set by the chart (kubernetesObjects.enabled: the objects in the release's namespace, the RBAC for them, the ServiceAccount's token); leave it out" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (ne .Values.mode "deployment") }}
{{- fail "podDisruptionBudget.enabled: needs mode: deployment (Jobs' pods are not disrupted, they are rerun)" }}
{{- end }}
{{- if and .Values.credentials.etcd.existingSecret .Values.credentials.etcd.kubeadm.enabled }}
{{- fail "credentials.etcd: set existingSecret or kubeadm.enabled, not both" }}
{{- end }}
{{- $etcd := .Values.config.etcd | default dict }}
{{- $fleet := eq .Values.mode "fleet" }}
{{- if $fleet }}
{{- include "lifeboat.validateFleet" . }}
{{- else if .Values.fleet.identities.existingSecret }}
{{- fail "fleet.identities.existingSecret: the fleet hub's identities (mode: fleet); the agent's is credentials.age.existingSecret" }}
{{- end }}
{{- if and (empty $etcd.endpoints) (not .Values.credentials.etcd.kubeadm.enabled) (not $fleet) }}
{{- fail "config.etcd.endpoints: required (e.g. [https://10.0.0.11:2379]), unless credentials.etcd.kubeadm.enabled uses the node's own etcd" }}
{{- end }}
{{- if $etcd.password }}
{{- fail "config.etcd.password: a secret never goes into the ConfigMap; put LIFEBOAT_ETCD_PASSWORD in credentials.env.existingSecret" }}
{{- end }}
{{- if (.Values.config.notify | default dict).webhooks }}
{{- fail "config.notify.webhooks: webhook URLs hold tokens and never go into the ConfigMap; put LIFEBOAT_NOTIFY_WEBHOOKS in credentials.env.existingSecret" }}
{{- end }}
{{- if and (not ((.Values.config.store | default dict).url)) (not (and $fleet ((.Values.config.fleet | default dict).stores))) }}
{{- fail "config.store.url: required (s3://BUCKET/PREFIX; mode fleet: or config.fleet.stores)" }}
{{- end }}
{{- if hasKey (.Values.config.kit | default dict) "root" }}
{{- fail "config.kit.root: set by the chart (/host, where it mounts the host's files of config.kit.paths); leave it out" }}
{{- end }}
{{- if and (ne .Values.mode "deployment") (not (empty .Values.config.schedule)) }}
{{- fail "config.schedule: the agent daemon's schedules (mode: deployment); the CronJobs never read them. In cronjob mode set cronjob.backup.schedule and cronjob.drill.schedule (Kubernetes cron syntax, in cronjob.timeZone)" }}
{{- end }}
{{- end }}

{{/* Mode fleet: the hub reaches no cluster and mounts only its identities. */}}
{{- define "lifeboat.validateFleet" -}}
{{- $c := .Values.credentials }}
{{- if or $c.etcd.existingSecret $c.etcd.kubeadm.enabled }}
{{- fail "credentials.etcd: mode fleet reaches no etcd (the hub reads the stores only); leave it out" }}
{{- end }}
{{- if $c.age.existingSecret }}
{{- fail "credentials.age.existingSecret: mode fleet decrypts with fleet.identities.existingSecret (one identity, or one per cluster)" }}
{{- end }}
{{- $cfg := .Values.config }}
{{- if ($cfg.kit | default dict).paths }}
{{- fail "config.kit.paths: mode fleet makes no backup and reads no host file; leave it out" }}
{{- end }}
{{- $fc := $cfg.fleet | default dict }}
{{- if hasKey $fc "cache_dir" }}
{{- fail "config.fleet.cache_dir: set by the chart (an emptyDir of fleet.cacheSizeLimit); leave it out" }}
{{- end }}
{{- if and .Values.fleet.identities.existingSecret (hasKey ($fc.drills | default dict) "identities") }}
{{- fail "config.fleet.drills.identities: set by the chart from fleet.identities.existingSecret; leave it out" }}
{{- end }}
{{- end }}

{{/* The agent daemon's schedules when config.schedule does not set them (mode deployment). */}}
{{- define "lifeboat.defaultSchedule" -}}
snapshot: "@every 1h"
prune: "@every 6h"
drill: "CRON_TZ=UTC 30 3 * * *"
jitter: 1m
{{- end }}

{{/* The host files and directories the recovery kit reads (config.kit.paths),
as a list of {path, type}: what the presets read, and explicit paths as they
are. Empty without kit paths. */}}
{{- define "lifeboat.kitHostPaths" -}}
{{- $out := list }}
{{- range ((.Values.config.kit | default dict).paths | default list) }}
{{- if eq . "kubeadm" }}
{{- $out = append $out (dict "path" "/etc/kubernetes/pki" "type" "Directory") }}
{{- /* The preset reads the manifest for --encryption-provider-config. */}}
{{- $out = append $out (dict "path" "/etc/kubernetes/manifests/kube-apiserver.yaml" "type" "File") }}
{{- with $.Values.kit.encryptionConfig }}
{{- $out = append $out (dict "path" . "type" "File") }}
{{- end }}
{{- else if eq . "k3s" }}
{{- $out = append $out (dict "path" "/var/lib/rancher/k3s/server/token" "type" "File") }}
{{- $out = append $out (dict "path" "/var/lib/rancher/k3s/server/tls" "type" "Directory") }}
{{- $out = append $out (dict "path" "/var/lib/rancher/k3s/server/cred" "type" "Directory") }}
{{- else }}
{{- $out = append $out (dict "path" . "type" "") }}
{{- end }}
{{- end }}
{{- toYaml (dict "paths" $out) }}
{{- end }}

{{/* The directories and credential files the pods mount, and where. */}}
{{- define "lifeboat.paths" -}}
config: /etc/lifeboat/config
etcd: /etc/lifeboat/etcd
age: /etc/lifeboat/age
state: /var/lib/lifeboat
spool: /var/lib/lifeboat/spool
scratch: /var/lib/lifeboat/scratch
kitRoot: /host
fleetCache: /var/lib/lifeboat/fleet-cache
fleetIdentities: /etc/lifeboat/fleet-identities
{{- end }}

{{/* config.yaml: the values' config with what the chart mounts. */}}
{{- define "lifeboat.config" -}}
{{- $p := include "lifeboat.paths" . | fromYaml }}
{{- $cfg := deepCopy .Values.config }}
{{- $managed := dict "snapshot" (dict "spool_dir" $p.spool) "drill" (dict "scratch_dir" $p.scratch) }}
{{- if eq .Values.mode "fleet" }}
{{- /* The hub takes no snapshot: no spool. */}}
{{- $fm := dict "cache_dir" $p.fleetCache }}
{{- with .Values.fleet.identities }}
{{- if .existingSecret }}
{{- $_ := set $fm "drills" (dict "identities" (ternary (printf "%s/%s" $p.fleetIdentities .key) $p.fleetIdentities (ne .key ""))) }}
{{- end }}
{{- end }}
{{- $managed = dict "drill" (dict "scratch_dir" $p.scratch) "fleet" $fm }}
{{- /* The agent's sections the values default: the hub reads none. */}}
{{- $cfg = omit $cfg "agent" "retention" }}
{{- if not ($cfg.store | default dict).url }}
{{- $_ := set $cfg "store" (omit ($cfg.store | default dict) "url") }}
{{- end }}
{{- end }}
{{- $c := .Values.credentials }}
{{- if $c.etcd.existingSecret }}
{{- $_ := set $managed "etcd" (dict "cacert" (printf "%s/ca.crt" $p.etcd) "cert" (printf "%s/tls.crt" $p.etcd) "key" (printf "%s/tls.key" $p.etcd)) }}
{{- else if $c.etcd.kubeadm.enabled }}
{{- $_ := set $managed "etcd" (dict "cacert" (printf "%s/ca.crt" $p.etcd) "cert" (printf "%s/%s" $p.etcd $c.etcd.kubeadm.cert) "key" (printf "%s/%s" $p.etcd $c.etcd.kubeadm.key)) }}
{{- end }}
{{- if $c.age.existingSecret }}
{{- $_ := set $managed "encryption" (dict "identity_file" (printf "%s/%s" $p.age $c.age.key)) }}
{{- end }}
{{- if ((.Values.config.kit | default dict).paths) }}
{{- $_ := set $managed "kit" (dict "root" $p.kitRoot) }}
{{- end }}
{{- if eq .Values.mode "deployment" }}
{{- $_ := set $cfg "schedule" (mergeOverwrite (include "lifeboat.defaultSchedule" . | fromYaml) ($cfg.schedule | default dict)) }}
{{- $_ := set $managed "agent" (dict "listen" (printf "0.0.0.0:%v" .Values.service.port)) }}
{{- $_ := set $managed "capture" (dict "enabled" .Values.capture.enabled) }}
{{- end }}
{{- if include "lifeboat.kubeObjects" . }}
{{- $_ := set $managed "kubernetes" (dict "objects" (dict "enabled" true) "namespace" .Release.Namespace) }}
{{- end }}
{{- $cfg = mergeOverwrite $cfg $managed }}
{{- if and (hasKey $cfg.etcd "endpoints") (empty $cfg.etcd.endpoints) }}
{{- /* kubeadm: LIFEBOAT_ETCD_ENDPOINTS names the node's member. */}}
{{- $_ := unset $cfg.etcd "endpoints" }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* The pod spec every mode shares; .args and .resources are the container's. */}}
{{- define "lifeboat.podSpec" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $p := include "lifeboat.paths" $root | fromYaml }}
{{- $kubeadm := $v.credentials.etcd.kubeadm.enabled }}
{{- $kitPaths := (include "lifeboat.kitHostPaths" $root | fromYaml).paths }}
{{- /* Files of the host, 0600 root: kubeadm's etcd PKI, the kit's files. */}}
{{- $hostFiles := or $kubeadm (not (empty $kitPaths)) }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
serviceAccountName: {{ include "lifeboat.serviceAccountName" $root }}
{{- if include "lifeboat.kubeObjects" $root }}
# The token reaches the API for the EtcdBackup objects (kubernetesObjects).
automountServiceAccountToken: true
{{- else }}
# lifeboat talks to etcd and the store, never to the Kubernetes API.
automountServiceAccountToken: false
{{- end }}
terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- if .restartNever }}
restartPolicy: Never
{{- end }}
securityContext:
  {{- if $hostFiles }}
  {{- /* kubeadm's keys are 0600 root: read them as root, nothing more. */}}
  {{- toYaml (mergeOverwrite (omit (deepCopy $v.podSecurityContext) "fsGroup") (dict "runAsNonRoot" false "runAsUser" 0 "runAsGroup" 0)) | nindent 2 }}
  {{- else }}
  {{- toYaml $v.podSecurityContext | nindent 2 }}
  {{- end }}
{{- if $v.nodeSelector }}
nodeSelector:
  {{- toYaml $v.nodeSelector | nindent 2 }}
{{- else if $hostFiles }}
nodeSelector:
  node-role.kubernetes.io/control-plane: ""
{{- end }}
{{- if $v.tolerations }}
tolerations:
  {{- toYaml $v.tolerations | nindent 2 }}
{{- else if $hostFiles }}
tolerations:
  - key: node-role.kubernetes.io/control-plane
    operator: Exists
    effect: NoSchedule
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: lifeboat
    image: {{ include "lifeboat.image" $root }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    args:
      {{- toYaml .args | nindent 6 }}
    {{- if or $kubeadm $v.extraEnv }}
    env:
      {{- if $kubeadm }}
      - name: HOST_IP
        valueFrom:
          fieldRef:
            fieldPath: status.hostIP
      {{- if empty ($v.config.etcd | default dict).endpoints }}
      # The node's own etcd member (kubeadm's stacked etcd).
      - name: LIFEBOAT_ETCD_ENDPOINTS
        value: https://$(HOST_IP):2379
      {{- end }}
      {{- end }}
      {{- with $v.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- end }}
    {{- if or $v.credentials.s3.existingSecret $v.credentials.env.existingSecret }}
    envFrom:
      {{- with $v.credentials.s3.existingSecret }}
      - secretRef:
          name: {{ . }}
      {{- end }}
      {{- with $v.credentials.env.existingSecret }}
      - secretRef:
          name: {{ . }}
      {{- end }}
    {{- end }}
    {{- with .ports }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    resources:
      {{- toYaml .resources | nindent 6 }}
    securityContext:
      {{- if $hostFiles }}
      {{- toYaml (mergeOverwrite (deepCopy $v.containerSecurityContext) (dict "runAsNonRoot" false)) | nindent 6 }}
      {{- else }}
      {{- toYaml $v.containerSecurityContext | nindent 6 }}
      {{- end }}
    volumeMounts:
      - name: config
        mountPath: {{ $p.config }}
        readOnly: true
      {{- if or $v.credentials.etcd.existingSecret $kubeadm }}
      - name: etcd-client
        mountPath: {{ $p.etcd }}
        readOnly: true
      {{- end }}
      {{- if $v.credentials.age.existingSecret }}
      - name: age
        mountPath: {{ $p.age }}
        readOnly: true
      {{- end }}
      {{- range $i, $hp := $kitPaths }}
      - name: kit-{{ $i }}
        mountPath: {{ printf "%s%s" $p.kitRoot $hp.path }}
        readOnly: true
      {{- end }}
      {{- if $hostFiles }}
      {{- /* Root with every capability dropped cannot search the image's
      /var/lib/lifeboat (0700, uid 65532): an empty directory over it holds
      the spool and scratch mounts. */}}
      - name: state
        mountPath: {{ $p.state }}
      {{- end }}
      {{- if ne $v.mode "fleet" }}
      - name: spool
        mountPath: {{ $p.spool }}
      {{- else }}
      - name: fleet-cache
        mountPath: {{ $p.fleetCache }}
      {{- if $v.fleet.identities.existingSecret }}
      - name: fleet-identities
        mountPath: {{ $p.fleetIdentities }}
        readOnly: true
      {{- end }}
      {{- end }}
      - name: scratch
        mountPath: {{ $p.scratch }}
      - name: tmp
        mountPath: /tmp
      {{- with $v.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
volumes:
  - name: config
    configMap:
      name: {{ include "lifeboat.fullname" $root }}
  {{- if $v.credentials.etcd.existingSecret }}
  - name: etcd-client
    secret:
      secretName: {{ $v.credentials.etcd.existingSecret }}
      defaultMode: 0400
  {{- else if $kubeadm }}
  - name: etcd-client
    hostPath:
      path: {{ $v.credentials.etcd.kubeadm.path }}
      type: Directory
  {{- end }}
  {{- with $v.credentials.age.existingSecret }}
  - name: age
    secret:
      secretName: {{ . }}
      defaultMode: 0400
  {{- end }}
  {{- range $i, $hp := $kitPaths }}
  - name: kit-{{ $i }}
    hostPath:
      path: {{ $hp.path }}
      {{- with $hp.type }}
      type: {{ . }}
      {{- end }}
  {{- end }}
  {{- if $hostFiles }}
  - name: state
    emptyDir:
      sizeLimit: 1Mi
  {{- end }}
  {{- if ne $v.mode "fleet" }}
  - name: spool
    emptyDir:
      sizeLimit: {{ $v.spoolSizeLimit }}
  {{- else }}
  - name: fleet-cache
    emptyDir:
      sizeLimit: {{ $v.fleet.cacheSizeLimit }}
  {{- with $v.fleet.identities.existingSecret }}
  - name: fleet-identities
    secret:
      secretName: {{ . }}
      defaultMode: 0400
  {{- end }}
  {{- end }}
  - name: scratch
    emptyDir:
      sizeLimit: {{ .scratchSizeLimit }}
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- with $v.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
