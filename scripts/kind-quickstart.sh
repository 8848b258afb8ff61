#!/usr/bin/env bash
# gputopo on kind, with fake GPUs: create a cluster (kind-config.yaml: 1 control plane, 2
# workers labelled as GPU nodes), build the gputopo image and load it into the nodes, install
# the chart with every device plugin faking a DGX-1 V100 (8 GPUs, hybrid cube-mesh NVLink),
# submit the 4-GPU ring example and print where gputopo placed it.
#
# Needs: docker (running), kind, kubectl; helm on PATH or the pinned one from
# scripts/build-k8s-tools.sh. Re-running is safe (existing cluster reused, release upgraded).
#
# Environment:
#   KIND_CLUSTER_NAME  cluster name (default gputopo)
#   KIND_NODE_IMAGE    kindest/node image (default: kind's own)
#   GPUTOPO_IMAGE      image to build and load (default gputopo:dev)
#   FAKE_TOPOLOGY      the fake GPUs: a catalog machine (default dgx1-v100), or a file —
#                      model your own machine with `nvidia-smi topo -m > mine.txt` run on it
#                      (or a topology JSON/YAML); the file is mounted into the device plugin
#   GPU_MEMORY_MIB     MiB per GPU when the topology names none (a topo -m text); unset: the
#                      nodes advertise no gputopo.io/vgpu-memory
#   EXAMPLE            pod manifest to submit (default examples/ring-4gpu.yaml)
# Clean up: kind delete cluster --name "${KIND_CLUSTER_NAME:-gputopo}"
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER_NAME:-gputopo}
IMAGE=${GPUTOPO_IMAGE:-gputopo:dev}
FAKE_TOPOLOGY=${FAKE_TOPOLOGY:-dgx1-v100}
GPU_MEMORY_MIB=${GPU_MEMORY_MIB:-}
EXAMPLE=${EXAMPLE:-examples/ring-4gpu.yaml}
NS=gputopo-system
CTX="kind-${CLUSTER}"

log() { echo "==> $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found in PATH"; }

need docker
need kind
need kubectl
HELM=${HELM:-$(command -v helm || true)}
if [[ -z "${HELM}" ]]; then
  HELM="$(scripts/build-k8s-tools.sh --print-bindir)/helm"
  [[ -x "${HELM}" ]] || die "helm not found: install it or run scripts/build-k8s-tools.sh"
fi
docker info >/dev/null 2>&1 || die "the docker daemon is not reachable"

if kind get clusters 2>/dev/null | grep -qx "${CLUSTER}"; then
  log "reusing kind cluster ${CLUSTER}"
else
  log "creating kind cluster ${CLUSTER}"
  kind create cluster --name "${CLUSTER}" --config kind-config.yaml \
    ${KIND_NODE_IMAGE:+--image "${KIND_NODE_IMAGE}"} --wait 180s
fi

log "building ${IMAGE}"
docker build -t "${IMAGE}" .
log "loading ${IMAGE} into the nodes"
kind load docker-image "${IMAGE}" --name "${CLUSTER}"

topology_args=(--set-string devicePlugin.fakeTopology="${FAKE_TOPOLOGY}")
if [[ -f "${FAKE_TOPOLOGY}" ]]; then
  # A file (your machine's saved `nvidia-smi topo -m`): mounted as is; every node then
  # publishes what `gputopo topology show FILE [--gpu-memory-mib N] --output json` prints.
  base=$(basename "${FAKE_TOPOLOGY}")
  [[ "${base}" =~ ^[A-Za-z0-9._-]+$ ]] \
    || die "rename ${FAKE_TOPOLOGY}: a ConfigMap key allows only letters, digits, '.', '_', '-'"
  topology_args=(--set-file "devicePlugin.topologyFiles.${base//./\\.}=${FAKE_TOPOLOGY}"
                 --set-string devicePlugin.fakeTopology="/etc/gputopo/topologies/${base}")
fi
if [[ -n "${GPU_MEMORY_MIB}" ]]; then
  topology_args+=(--set devicePlugin.gpuMemoryMiB="${GPU_MEMORY_MIB}")
fi

log "installing the chart (fake topology ${FAKE_TOPOLOGY} on every GPU node)"
"${HELM}" upgrade --install gputopo helm/gputopo \
  --kube-context "${CTX}" --namespace "${NS}" --create-namespace \
  --set-string image.repository="${IMAGE%:*}" \
  --set-string image.tag="${IMAGE##*:}" \
  "${topology_args[@]}" \
  --wait --timeout 5m

log "waiting for the workers to advertise GPUs"
workers=$(kubectl --context "${CTX}" get nodes -l nvidia.com/gpu.present=true -o name)
[[ -n "${workers}" ]] || die "no node is labelled nvidia.com/gpu.present=true"
for node in ${workers}; do
  for _ in $(seq 1 60); do
    gpus=$(kubectl --context "${CTX}" get "${node}" \
      -o jsonpath='{.status.allocatable.nvidia\.com/gpu}' 2>/dev/null || true)
    [[ -n "${gpus}" && "${gpus}" != "0" ]] && break
    sleep 2
  done
  [[ -n "${gpus}" && "${gpus}" != "0" ]] || die "${node} advertises no nvidia.com/gpu"
  echo "${node}: ${gpus} GPUs, topology class $(kubectl --context "${CTX}" get "${node}" \
    -o jsonpath='{.metadata.labels.gputopo\.io/topology-class}')"
done

pod=$(kubectl --context "${CTX}" create -f "${EXAMPLE}" -o jsonpath='{.metadata.name}')
log "submitted ${EXAMPLE} as pod/${pod}"
kubectl --context "${CTX}" wait --for=condition=PodScheduled "pod/${pod}" --timeout=120s
kubectl --context "${CTX}" get pod "${pod}" -o jsonpath='node                 {.spec.nodeName}
gpus                 {.metadata.annotations.gputopo\.io/gpu-indices}
effective bandwidth  {.metadata.annotations.gputopo\.io/effective-bandwidth-gbps} GB/s
cpu affinity         {.metadata.annotations.gputopo\.io/cpu-affinity}
decided by           {.metadata.annotations.gputopo\.io/decided-by}
'
log "more: kubectl --context ${CTX} create -f examples/notebook-1gpu.yaml (and the others in examples/)"
log "logs: kubectl --context ${CTX} logs -n ${NS} deploy/gputopo-scheduler -c extender (a sidecar of each scheduler replica)"
