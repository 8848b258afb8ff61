{{/*
The extender container, for its standalone Deployment or as a sidecar of kube-scheduler.
Arguments (dict): root (the chart context), sidecar (bool). In a sidecar it is a native sidecar
(an init container with restartPolicy Always, Kubernetes >= 1.29): it starts first, and
kube-scheduler starts only once its startupProbe (/readyz: nodes and pods listed) passes, so a
scheduler never leads with an extender that has not synced; the kubelet restarts it alone if
it dies.
*/}}
{{- define "gputopo.extender.container" -}}
{{- $root := .root -}}
{{- $e := $root.Values.extender -}}
{{- $tls := $e.tls -}}
{{- $scheme := include "gputopo.extender.scheme" $root -}}
- name: extender
  image: {{ include "gputopo.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  {{- if .sidecar }}
  restartPolicy: Always
  {{- end }}
  args:
    - extender
    - --config=/etc/gputopo/extender.yaml
    {{- with $e.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    - name: PYTHONUNBUFFERED
      value: "1"
    - name: MPLCONFIGDIR
      value: /tmp/matplotlib
    {{- with $e.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: {{ $scheme }}
      containerPort: {{ $e.port }}
      protocol: TCP
  {{- if .sidecar }}
  startupProbe:
    httpGet:
      path: /readyz
      port: {{ $scheme }}
      scheme: {{ upper $scheme }}
    periodSeconds: 2
    failureThreshold: 300
  {{- end }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ $scheme }}
      scheme: {{ upper $scheme }}
    periodSeconds: 5
    failureThreshold: 3
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ $scheme }}
      scheme: {{ upper $scheme }}
    {{- if not .sidecar }}
    initialDelaySeconds: 10
    {{- end }}
    periodSeconds: 10
    failureThreshold: 3
  resources:
    {{- toYaml $e.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: [ALL]
  volumeMounts:
    - name: extender-config
      mountPath: /etc/gputopo
      readOnly: true
    - name: extender-tmp
      mountPath: /tmp
    {{- if $tls.enabled }}
    - name: tls
      mountPath: /etc/gputopo-tls
      readOnly: true
    {{- end }}
    {{- if or $e.colocation.userProfiles $e.colocation.userProfilesConfigMap }}
    - name: user-profiles
      mountPath: /etc/gputopo-profiles/user
      readOnly: true
    {{- end }}
    {{- if and $root.Values.devicePlugin.enabled $root.Values.devicePlugin.profiling.enabled }}
    - name: measured-profiles
      mountPath: /etc/gputopo-profiles/measured
      readOnly: true
    {{- end }}
{{- end -}}

{{/* The volumes of the extender container (same arguments). */}}
{{- define "gputopo.extender.volumes" -}}
{{- $root := .root -}}
{{- $e := $root.Values.extender -}}
- name: extender-config
  configMap:
    name: {{ include "gputopo.extender.fullname" $root }}
- name: extender-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if $e.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "gputopo.extender.tlsSecret" $root }}
{{- end }}
{{- if or $e.colocation.userProfiles $e.colocation.userProfilesConfigMap }}
- name: user-profiles
  configMap:
    name: {{ include "gputopo.userProfiles" $root }}
{{- end }}
{{- if and $root.Values.devicePlugin.enabled $root.Values.devicePlugin.profiling.enabled }}
# written by the device plugins (one key per node); absent until the first measurement
- name: measured-profiles
  configMap:
    name: {{ include "gputopo.measuredProfiles" $root }}
    optional: true
{{- end }}
{{- end -}}

{{/* The scheduler's client-certificate Secret (extender.tls.clientAuth). */}}
{{- define "gputopo.scheduler.clientSecret" -}}
{{- if .Values.extender.tls.clientAuth.secretName -}}
{{- .Values.extender.tls.clientAuth.secretName -}}
{{- else -}}
{{- include "gputopo.scheduler.fullname" . }}-extender-client
{{- end -}}
{{- end -}}
