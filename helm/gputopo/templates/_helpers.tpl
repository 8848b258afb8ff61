{{/* Chart name (nameOverride). */}}
{{- define "gputopo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: the release name when it contains the chart name. */}}
{{- define "gputopo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gputopo.extender.fullname" -}}{{ include "gputopo.fullname" . }}-extender{{- end -}}
{{- define "gputopo.scheduler.fullname" -}}{{ include "gputopo.fullname" . }}-scheduler{{- end -}}
{{- define "gputopo.devicePlugin.fullname" -}}{{ include "gputopo.fullname" . }}-device-plugin{{- end -}}
{{- define "gputopo.mps.fullname" -}}{{ include "gputopo.fullname" . }}-mps-control-daemon{{- end -}}
{{/* The ConfigMap the device plugins write measured co-location profiles to (one key per node). */}}
{{- define "gputopo.measuredProfiles" -}}{{ include "gputopo.fullname" . }}-measured-profiles{{- end -}}
{{- define "gputopo.userProfiles" -}}
{{- .Values.extender.colocation.userProfilesConfigMap | default (printf "%s-user-profiles" (include "gputopo.extender.fullname" .)) -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gputopo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gputopo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gputopo
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: include with (dict "root" $ "component" "extender"). */}}
{{- define "gputopo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gputopo.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gputopo.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The name of the extender's TLS Secret. */}}
{{- define "gputopo.extender.tlsSecret" -}}
{{- if .Values.extender.tls.secretName -}}
{{- .Values.extender.tls.secretName -}}
{{- else -}}
{{- include "gputopo.extender.fullname" . }}-tls
{{- end -}}
{{- end -}}

{{- define "gputopo.extender.scheme" -}}
{{- if .Values.extender.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* "true" when the extender runs as a sidecar of the scheduler pods, else "" (with the
chart's scheduler off, a sidecar extender has no pod to live in: it runs standalone, for a
scheduler outside the chart). */}}
{{- define "gputopo.extender.sidecar" -}}
{{- if and .Values.extender.enabled .Values.scheduler.enabled (eq .Values.extender.mode "sidecar") -}}true{{- end -}}
{{- end -}}

{{/* The URL the scheduler calls: extender.urlOverride, else its own sidecar on loopback, else
the Service's DNS name. */}}
{{- define "gputopo.extender.url" -}}
{{- if .Values.extender.urlOverride -}}
{{- .Values.extender.urlOverride | trimSuffix "/" -}}
{{- else if include "gputopo.extender.sidecar" . -}}
{{- printf "http://127.0.0.1:%d" (int .Values.extender.port) -}}
{{- else -}}
{{- printf "%s://%s.%s.svc:%d" (include "gputopo.extender.scheme" .) (include "gputopo.extender.fullname" .) .Release.Namespace (int .Values.extender.service.port) -}}
{{- end -}}
{{- end -}}

{{/* Fail early on inconsistent values the schema cannot express. */}}
{{- define "gputopo.validate" -}}
{{- $tls := .Values.extender.tls -}}
{{- if $tls.enabled -}}
{{- if and (not $tls.secretName) (or (not $tls.cert) (not $tls.key)) -}}
{{- fail "extender.tls.enabled needs extender.tls.secretName, or both extender.tls.cert and extender.tls.key" -}}
{{- end -}}
{{- if and $tls.secretName (or $tls.cert $tls.key) -}}
{{- fail "extender.tls: give either secretName or cert+key, not both" -}}
{{- end -}}
{{- if and (not $tls.caCert) (not $tls.insecureSkipVerify) -}}
{{- fail "extender.tls.enabled needs extender.tls.caCert (the scheduler verifies the extender with it) or extender.tls.insecureSkipVerify=true" -}}
{{- end -}}
{{- end -}}
{{- if .Values.extender.urlOverride -}}
{{- if not (regexMatch "^https?://[^/\\s]+(/.*)?$" .Values.extender.urlOverride) -}}
{{- fail (printf "extender.urlOverride %q is not an http(s) URL" .Values.extender.urlOverride) -}}
{{- end -}}
{{- if and $tls.enabled (not (hasPrefix "https://" .Values.extender.urlOverride)) -}}
{{- fail "extender.urlOverride must be https:// when extender.tls.enabled" -}}
{{- end -}}
{{- end -}}
{{- if include "gputopo.extender.sidecar" . -}}
{{- if $tls.enabled -}}
{{- fail "extender.tls is for extender.mode standalone: a sidecar is called on 127.0.0.1 and accepts loopback callers only" -}}
{{- end -}}
{{- end -}}
{{- $ca := $tls.clientAuth -}}
{{- if $ca.enabled -}}
{{- if not $tls.enabled -}}
{{- fail "extender.tls.clientAuth needs extender.tls.enabled (mutual TLS)" -}}
{{- end -}}
{{- if not $ca.caCert -}}
{{- fail "extender.tls.clientAuth needs caCert (the CA that signs the scheduler's client certificate)" -}}
{{- end -}}
{{- if not $ca.allowedNames -}}
{{- fail "extender.tls.clientAuth needs allowedNames (client certificate common names)" -}}
{{- end -}}
{{- if and .Values.scheduler.enabled (not $ca.secretName) (or (not $ca.cert) (not $ca.key)) -}}
{{- fail "extender.tls.clientAuth needs secretName, or cert and key: the scheduler's client certificate" -}}
{{- end -}}
{{- if and $ca.secretName (or $ca.cert $ca.key) -}}
{{- fail "extender.tls.clientAuth: give either secretName or cert+key, not both" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.scheduler.enabled (not .Values.extender.enabled) (not .Values.extender.urlOverride) -}}
{{- fail "scheduler.enabled needs the extender: set extender.enabled or extender.urlOverride" -}}
{{- end -}}
{{- end -}}

{{/* The KubeSchedulerConfiguration of gputopo-scheduler (YAML text). */}}
{{- define "gputopo.scheduler.config" -}}
{{- $s := .Values.scheduler -}}
{{- $e := $s.extender -}}
{{- $tls := .Values.extender.tls -}}
{{- $profile := dict "schedulerName" $s.schedulerName -}}
{{- with $s.plugins }}{{ $_ := set $profile "plugins" . }}{{ end -}}
{{- with $s.pluginConfig }}{{ $_ := set $profile "pluginConfig" . }}{{ end -}}
{{- $resources := list -}}
{{- range $e.managedResources -}}
{{- $resources = append $resources (dict "name" .name "ignoredByScheduler" .ignoredByScheduler) -}}
{{- end -}}
{{- $ext := dict
  "urlPrefix" (include "gputopo.extender.url" .)
  "filterVerb" "filter"
  "prioritizeVerb" "prioritize"
  "bindVerb" "bind"
  "weight" (int $e.weight)
  "httpTimeout" $e.httpTimeout
  "nodeCacheCapable" $e.nodeCacheCapable
  "ignorable" $e.ignorable
  "managedResources" $resources -}}
{{- if $e.preemptVerb }}{{ $_ := set $ext "preemptVerb" $e.preemptVerb }}{{ end -}}
{{- if $tls.enabled -}}
{{- $_ := set $ext "enableHTTPS" true -}}
{{- $tlsConfig := dict -}}
{{- if $tls.caCert }}{{ $_ := set $tlsConfig "caData" ($tls.caCert | b64enc) }}{{ end -}}
{{- if $tls.serverName }}{{ $_ := set $tlsConfig "serverName" $tls.serverName }}{{ end -}}
{{- if $tls.insecureSkipVerify }}{{ $_ := set $tlsConfig "insecure" true }}{{ end -}}
{{- if $tls.clientAuth.enabled -}}
{{- $_ := set $tlsConfig "certFile" "/etc/gputopo-scheduler-client/tls.crt" -}}
{{- $_ := set $tlsConfig "keyFile" "/etc/gputopo-scheduler-client/tls.key" -}}
{{- end -}}
{{- $_ := set $ext "tlsConfig" $tlsConfig -}}
{{- end -}}
{{- $le := dict "leaderElect" $s.leaderElection.enabled -}}
{{- if $s.leaderElection.enabled -}}
{{- $_ := set $le "resourceNamespace" .Release.Namespace -}}
{{- $_ := set $le "resourceName" $s.leaderElection.leaseName -}}
{{- with $s.leaderElection.leaseDuration }}{{ $_ := set $le "leaseDuration" . }}{{ end -}}
{{- with $s.leaderElection.renewDeadline }}{{ $_ := set $le "renewDeadline" . }}{{ end -}}
{{- with $s.leaderElection.retryPeriod }}{{ $_ := set $le "retryPeriod" . }}{{ end -}}
{{- end -}}
{{- $cfg := dict
  "apiVersion" "kubescheduler.config.k8s.io/v1"
  "kind" "KubeSchedulerConfiguration"
  "leaderElection" $le
  "profiles" (list $profile)
  "extenders" (list $ext) -}}
{{- if not (kindIs "invalid" $s.percentageOfNodesToScore) -}}
{{- $_ := set $cfg "percentageOfNodesToScore" (int $s.percentageOfNodesToScore) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Prometheus scrape annotations. */}}
{{- define "gputopo.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
prometheus.io/scheme: {{ .scheme }}
{{- end -}}

{{/* The extender's settings file (keys of scheduler_extender.settings.ExtenderSettings). */}}
{{- define "gputopo.extender.settings" -}}
host: 0.0.0.0
port: {{ .Values.extender.port }}
state: kubernetes
policy: {{ .Values.extender.policy }}
postpone_max_s: {{ .Values.extender.postponeMaxSeconds }}
# the scheduler profile served: its pending GPU pods are the waiting jobs the policy weighs
scheduler_name: {{ .Values.scheduler.schedulerName }}
log_level: {{ .Values.extender.logLevel }}
# the device plugins' unit (one value for both programs: pods count vGPU memory in it)
vgpu_memory_unit_mib: {{ .Values.devicePlugin.vgpuMemoryUnitMiB }}
# co-location (gputopo.io/gpu-shared pods)
colocation_policy: {{ .Values.extender.colocation.policy }}
colocation_threshold: {{ .Values.extender.colocation.threshold | float64 | printf "%.1f" }}
profile_catalog: {{ .Values.extender.colocation.profileCatalog }}
{{- if or .Values.extender.colocation.userProfiles .Values.extender.colocation.userProfilesConfigMap }}
user_profiles: /etc/gputopo-profiles/user
{{- end }}
{{- if and .Values.devicePlugin.enabled .Values.devicePlugin.profiling.enabled }}
measured_profiles: /etc/gputopo-profiles/measured
{{- end }}
{{- if .Values.extender.tls.enabled }}
tls_cert: /etc/gputopo-tls/tls.crt
tls_key: /etc/gputopo-tls/tls.key
{{- end }}
{{- if include "gputopo.extender.sidecar" . }}
# a sidecar of kube-scheduler: the verbs answer loopback callers only (403 otherwise);
# /healthz, /readyz and /metrics on every interface
auth: loopback
{{- else if .Values.extender.tls.clientAuth.enabled }}
# mutual TLS: 401 without a client certificate, 403 for a name not allowed
auth: mtls
client_ca: /etc/gputopo/client-ca.crt
allowed_client_names:
{{- range .Values.extender.tls.clientAuth.allowedNames }}
  - {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
One device-plugin DaemonSet. Arguments (dict):
  root     the chart context
  suffix   appended to the name ("" for the main DaemonSet)
  fake     fake topology (catalog name or file) or ""
  label    value of gputopo.io/fake-topology this DaemonSet selects ("" = none)
  exclude  label values served by other DaemonSets (the main one avoids those nodes)
*/}}
{{- define "gputopo.devicePlugin.daemonset" -}}
{{- $root := .root -}}
{{- $dp := $root.Values.devicePlugin -}}
{{- $name := printf "%s%s" (include "gputopo.devicePlugin.fullname" $root) .suffix -}}
{{- $component := printf "device-plugin%s" .suffix -}}
{{- $nodeSelector := deepCopy $dp.nodeSelector -}}
{{- if .label }}{{ $_ := set $nodeSelector "gputopo.io/fake-topology" .label }}{{ end -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gputopo.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
spec:
  selector:
    matchLabels:
      {{- include "gputopo.selectorLabels" (dict "root" $root "component" $component) | nindent 6 }}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  template:
    metadata:
      labels:
        {{- include "gputopo.selectorLabels" (dict "root" $root "component" $component) | nindent 8 }}
      {{- if or (and $root.Values.metrics.podAnnotations (gt (int $dp.metricsPort) 0)) $dp.podAnnotations }}
      annotations:
        {{- if and $root.Values.metrics.podAnnotations (gt (int $dp.metricsPort) 0) }}
        {{- include "gputopo.scrapeAnnotations" (dict "port" $dp.metricsPort "scheme" "http") | nindent 8 }}
        {{- end }}
        {{- with $dp.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "gputopo.devicePlugin.fullname" $root }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $dp.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $dp.runtimeClassName }}
      runtimeClassName: {{ . }}
      {{- end }}
      securityContext:
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: device-plugin
          image: {{ include "gputopo.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - device-plugin
            - --node-name=$(NODE_NAME)
            - --device-plugin-dir={{ $dp.kubeletRootDir | trimSuffix "/" }}/device-plugins
            - --metrics-port={{ $dp.metricsPort }}
            {{- with .fake }}
            - --fake-topology={{ . }}
            - --omit-missing-device-nodes
            {{- end }}
            {{- with $dp.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
            - name: GPUTOPO_DP_POD_RESOURCES_SOCKET
              value: {{ $dp.kubeletRootDir | trimSuffix "/" }}/pod-resources/kubelet.sock
            - name: GPUTOPO_DP_VGPU_MEMORY_UNIT_MIB
              value: {{ $dp.vgpuMemoryUnitMiB | quote }}
            {{- if not (kindIs "invalid" $dp.gpuMemoryMiB) }}
            - name: GPUTOPO_DP_GPU_MEMORY_MIB
              value: {{ $dp.gpuMemoryMiB | int | quote }}
            {{- end }}
            {{- with $dp.gpuModel }}
            - name: GPUTOPO_DP_GPU_MODEL
              value: {{ . | quote }}
            {{- end }}
            - name: GPUTOPO_DP_HEALTH_RECOVERY_S
              value: {{ $dp.healthRecoverySeconds | quote }}
            - name: GPUTOPO_DP_SHARED_SLOTS
              value: {{ $dp.sharedSlots | quote }}
            {{- if $root.Values.mps.enabled }}
            # the MPS control daemon's pipes and /dev/shm, handed to co-location slots
            - name: GPUTOPO_DP_MPS_PIPE_DIR
              value: {{ $root.Values.mps.pipeDir | quote }}
            - name: GPUTOPO_DP_MPS_SHM_DIR
              value: {{ $root.Values.mps.shmDir | quote }}
            {{- end }}
            {{- if $dp.profiling.enabled }}
            - name: NODE_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.hostIP
            - name: GPUTOPO_DP_DCGM_EXPORTER_URL
              value: {{ $dp.profiling.dcgmExporterUrl | quote }}
            - name: GPUTOPO_DP_PROFILE_SINK
              value: {{ printf "configmap:%s/%s" $root.Release.Namespace (include "gputopo.measuredProfiles" $root) | quote }}
            - name: GPUTOPO_DP_PROFILE_INTERVAL_S
              value: {{ $dp.profiling.intervalSeconds | quote }}
            - name: GPUTOPO_DP_PROFILE_WINDOW
              value: {{ $dp.profiling.window | quote }}
            {{- end }}
            - name: GPUTOPO_DP_LOG_LEVEL
              value: {{ $dp.logLevel | quote }}
            {{- $kubelet := default dict $dp.kubelet }}
            {{- with $kubelet.configFile }}
            - name: GPUTOPO_DP_KUBELET_CONFIG_FILE
              value: /etc/gputopo/kubelet/config.yaml
            {{- end }}
            {{- with $kubelet.topologyManagerPolicy }}
            - name: GPUTOPO_DP_KUBELET_TOPOLOGY_MANAGER_POLICY
              value: {{ . | quote }}
            {{- end }}
            {{- with $kubelet.topologyManagerScope }}
            - name: GPUTOPO_DP_KUBELET_TOPOLOGY_MANAGER_SCOPE
              value: {{ . | quote }}
            {{- end }}
            {{- with $kubelet.cpuManagerPolicy }}
            - name: GPUTOPO_DP_KUBELET_CPU_MANAGER_POLICY
              value: {{ . | quote }}
            {{- end }}
            - name: PYTHONUNBUFFERED
              value: "1"
            - name: MPLCONFIGDIR
              value: /tmp/matplotlib
            {{- if not .fake }}
            # The NVIDIA container runtime mounts the driver (NVML) and every GPU into the plugin.
            - name: NVIDIA_VISIBLE_DEVICES
              value: all
            - name: NVIDIA_DRIVER_CAPABILITIES
              value: utility
            {{- end }}
            {{- with $dp.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if gt (int $dp.metricsPort) 0 }}
          ports:
            - name: metrics
              containerPort: {{ $dp.metricsPort }}
              protocol: TCP
          {{- end }}
          resources:
            {{- toYaml $dp.resources | nindent 12 }}
          securityContext:
            # uid 0 (the image's default user is 65532) but no capability: the kubelet's
            # device-plugins/ and pod-resources/ are root-owned 0750 and its sockets root-only
            # writable, so only their owner can create the plugin's sockets and connect to
            # kubelet.sock; as the owner it needs no CAP_DAC_OVERRIDE (docs/security.md).
            runAsUser: 0
            runAsGroup: 0
            {{- if $dp.privileged }}
            privileged: true
            {{- else }}
            allowPrivilegeEscalation: false
            capabilities:
              drop: [ALL]
            {{- end }}
            readOnlyRootFilesystem: true
          volumeMounts:
            - name: device-plugins
              mountPath: {{ $dp.kubeletRootDir | trimSuffix "/" }}/device-plugins
            - name: pod-resources
              mountPath: {{ $dp.kubeletRootDir | trimSuffix "/" }}/pod-resources
              readOnly: true
            - name: tmp
              mountPath: /tmp
            {{- if $dp.topologyFiles }}
            - name: topologies
              mountPath: /etc/gputopo/topologies
              readOnly: true
            {{- end }}
            {{- if (default dict $dp.kubelet).configFile }}
            - name: kubelet-config
              mountPath: /etc/gputopo/kubelet/config.yaml
              readOnly: true
            {{- end }}
      volumes:
        - name: device-plugins
          hostPath:
            path: {{ $dp.kubeletRootDir | trimSuffix "/" }}/device-plugins
            type: Directory
        - name: pod-resources
          hostPath:
            path: {{ $dp.kubeletRootDir | trimSuffix "/" }}/pod-resources
            type: DirectoryOrCreate
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- if $dp.topologyFiles }}
        - name: topologies
          configMap:
            name: {{ include "gputopo.devicePlugin.fullname" $root }}-topologies
        {{- end }}
        {{- with (default dict $dp.kubelet).configFile }}
        # only the kubelet's config file, not its directory (which holds its credentials)
        - name: kubelet-config
          hostPath:
            path: {{ . }}
            type: File
        {{- end }}
      {{- with $nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $dp.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if or .exclude $dp.affinity }}
      affinity:
        {{- $affinity := deepCopy $dp.affinity }}
        {{- if .exclude }}
        {{- $term := dict "matchExpressions" (list (dict "key" "gputopo.io/fake-topology" "operator" "NotIn" "values" .exclude)) }}
        {{- $na := default dict $affinity.nodeAffinity }}
        {{- $req := default dict (get $na "requiredDuringSchedulingIgnoredDuringExecution") }}
        {{- $terms := default list (get $req "nodeSelectorTerms") }}
        {{- if $terms }}
        {{- $merged := list }}
        {{- range $terms }}
        {{- $t := deepCopy . }}
        {{- $_ := set $t "matchExpressions" (append (default list (get $t "matchExpressions")) (index $term.matchExpressions 0)) }}
        {{- $merged = append $merged $t }}
        {{- end }}
        {{- $terms = $merged }}
        {{- else }}
        {{- $terms = list $term }}
        {{- end }}
        {{- $_ := set $req "nodeSelectorTerms" $terms }}
        {{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req }}
        {{- $_ := set $affinity "nodeAffinity" $na }}
        {{- end }}
        {{- toYaml $affinity | nindent 8 }}
      {{- end }}
{{- end -}}

{{- define "gputopo.draAllocator.fullname" -}}{{ include "gputopo.fullname" . }}-dra-allocator{{- end -}}
{{- define "gputopo.planner.fullname" -}}{{ include "gputopo.fullname" . }}-planner{{- end -}}

{{/* The planner's settings file (keys of planner.settings.PlannerSettings). */}}
{{- define "gputopo.planner.settings" -}}
{{- $p := .Values.planner -}}
namespace: {{ $p.namespace | quote }}
queue: {{ $p.queue | quote }}
interval_s: {{ $p.intervalSeconds }}
profiles_configmap: {{ printf "%s/%s-profiles" .Release.Namespace (include "gputopo.planner.fullname" .) }}
rho: {{ $p.rho }}
max_iterations: {{ $p.maxIterations }}
pue: {{ $p.pue }}
eur_per_kwh: {{ $p.eurPerKWh }}
restart_s: {{ $p.restartSeconds }}
move_penalty_eur: {{ $p.movePenaltyEUR }}
postpone_max_s: {{ $p.postponeMaxSeconds }}
leader_elect: true
lease_name: {{ include "gputopo.planner.fullname" . }}
lease_namespace: {{ .Release.Namespace }}
metrics_host: 0.0.0.0
metrics_port: {{ $p.metricsPort }}
log_level: {{ $p.logLevel }}
{{- end -}}
