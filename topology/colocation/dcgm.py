"""Measured profiles from NVIDIA dcgm-exporter's Prometheus exposition text.

dcgm-exporter serves one gauge line per GPU and field, labelled as its GPU template renders it
(``internal/pkg/rendermetrics``)::

    # HELP DCGM_FI_PROF_SM_OCCUPANCY The ratio of number of warps resident on an SM.
    # TYPE DCGM_FI_PROF_SM_OCCUPANCY gauge
    DCGM_FI_PROF_SM_OCCUPANCY{gpu="0",UUID="GPU-…",pci_bus_id="00000000:06:00.0",
        device="nvidia0",modelName="Tesla V100-SXM2-16GB",Hostname="node-1",
        DCGM_FI_DRIVER_VERSION="535.104.05",container="main",namespace="ml",pod="train-0"} 0.35

``gpu`` is the NVML index, ``UUID`` the GPU UUID (the label name is configurable in
dcgm-exporter; ``UUID`` is its default), MIG instances add ``GPU_I_PROFILE``/``GPU_I_ID``,
and with Kubernetes pod mapping enabled the workload using the GPU is named by ``pod``,
``namespace`` and ``container`` (empty strings when none). The fields read here:

* ``DCGM_FI_PROF_SM_OCCUPANCY`` — ratio of resident warps to the SMs' maximum, time-averaged
  over the sampling interval (a profiling field: enable it in the exporter's collectors CSV;
  the shipped ``default-counters.csv`` has it commented out);
* ``DCGM_FI_PROF_DRAM_ACTIVE`` — ratio of cycles the device memory interface is active;
* ``DCGM_FI_DEV_FB_USED`` — framebuffer memory used, MiB.

The text is parsed with prometheus-client's parser (``text_string_to_metric_families``). Samples
of a job running **alone** on a GPU, averaged over a window of scrapes and combined with the
job's solo iteration time, give its profile (:func:`topology.colocation.profile.from_ratios`:
C = occupancy · 100 · 2 · t_j · 10⁶, Tabrizian Eq. 4.3 units).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from topology.colocation.profile import JobProfile, ProfileError, from_ratios

SM_OCCUPANCY = "DCGM_FI_PROF_SM_OCCUPANCY"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FIELDS = (SM_OCCUPANCY, DRAM_ACTIVE, FB_USED)
#: dcgm-exporter's default name of the GPU-UUID label (``--uuid-label``-style configurable).
UUID_LABELS = ("UUID", "uuid", "gpu_uuid")


@dataclass(frozen=True)
class GPUReading:
    """One scrape's values for one physical GPU.

    Attributes:
        gpu: NVML index (``gpu`` label).
        uuid: GPU UUID (``UUID`` label), "" if absent.
        pci_bus_id, device, model_name, hostname: the remaining GPU labels ("" if absent).
        pods: ``namespace/pod/container`` of every workload the exporter attributed to the GPU
            in this scrape (empty when none or when pod mapping is off).
        sm_occupancy: ``DCGM_FI_PROF_SM_OCCUPANCY`` (0–1) or None when not exported.
        dram_active: ``DCGM_FI_PROF_DRAM_ACTIVE`` (0–1) or None.
        fb_used_mib: ``DCGM_FI_DEV_FB_USED`` (MiB) or None.
    """

    gpu: int
    uuid: str
    pci_bus_id: str
    device: str
    model_name: str
    hostname: str
    pods: tuple[str, ...]
    sm_occupancy: float | None
    dram_active: float | None
    fb_used_mib: float | None


def _uuid(labels: Mapping[str, str]) -> str:
    for name in UUID_LABELS:
        if labels.get(name):
            return labels[name]
    return ""


def parse_exposition(text: str) -> dict[int, GPUReading]:
    """Per-GPU readings from one dcgm-exporter scrape (the ``/metrics`` body).

    Series of MIG instances (``GPU_I_ID`` label) are skipped: a profile describes a whole GPU.
    Other metric families are ignored.

    Args:
        text: Prometheus text exposition format, as dcgm-exporter serves it.

    Returns:
        ``{gpu index: GPUReading}`` for every GPU that carries at least one of :data:`FIELDS`.

    Raises:
        ProfileError: the text is not Prometheus exposition format, a GPU series has no
            numeric ``gpu`` label, or a ratio is outside [0, 1].
    """
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError) as exc:
        raise ProfileError(f"not Prometheus exposition text: {exc}") from None
    values: dict[int, dict[str, float]] = {}
    labels_of: dict[int, dict[str, str]] = {}
    pods: dict[int, set[str]] = {}
    for fam in families:
        if fam.name not in FIELDS:
            continue
        for sample in fam.samples:
            if sample.name != fam.name:
                continue
            lab = dict(sample.labels)
            if lab.get("GPU_I_ID"):
                continue
            try:
                gpu = int(lab.get("gpu", ""))
            except ValueError:
                raise ProfileError(
                    f"{fam.name} series without a numeric gpu label: {lab}"
                ) from None
            value = float(sample.value)
            if fam.name != FB_USED and not 0.0 <= value <= 1.0:
                raise ProfileError(f"{fam.name} of GPU {gpu} is {value}, not a ratio in [0, 1]")
            values.setdefault(gpu, {})[fam.name] = value
            labels_of.setdefault(gpu, lab)
            if lab.get("pod"):
                pods.setdefault(gpu, set()).add(
                    f"{lab.get('namespace', '')}/{lab['pod']}/{lab.get('container', '')}"
                )
    out: dict[int, GPUReading] = {}
    for gpu, vals in sorted(values.items()):
        lab = labels_of[gpu]
        out[gpu] = GPUReading(
            gpu=gpu,
            uuid=_uuid(lab),
            pci_bus_id=lab.get("pci_bus_id", ""),
            device=lab.get("device", ""),
            model_name=lab.get("modelName", ""),
            hostname=lab.get("Hostname", ""),
            pods=tuple(sorted(pods.get(gpu, ()))),
            sm_occupancy=vals.get(SM_OCCUPANCY),
            dram_active=vals.get(DRAM_ACTIVE),
            fb_used_mib=vals.get(FB_USED),
        )
    return out


def _find(reading_set: Mapping[int, GPUReading], gpu: int | str) -> GPUReading | None:
    if isinstance(gpu, int):
        return reading_set.get(gpu)
    for r in reading_set.values():
        if r.uuid == gpu:
            return r
    return None


def measured_profile(
    scrapes: Sequence[Mapping[int, GPUReading]],
    gpu: int | str,
    *,
    iteration_s: float,
    key: str | None = None,
    memory_mib: int | None = None,
) -> JobProfile:
    """The profile of a job that ran alone on ``gpu`` during ``scrapes``.

    Averages SM occupancy and DRAM activity over the scrapes and converts them with the job's
    solo iteration time (Tabrizian Eq. 4.2/4.3 units; :func:`from_ratios`). Memory is
    ``memory_mib`` when given, else the largest ``DCGM_FI_DEV_FB_USED`` seen.

    Args:
        scrapes: :func:`parse_exposition` results of successive scrapes, oldest first.
        gpu: the GPU's NVML index or UUID.
        iteration_s: the job's solo iteration time, seconds (dcgm-exporter cannot see it).
        key: the profile key the measurement is for (``resnet18:64``).
        memory_mib: the job's GPU memory, MiB, if known better than FB_USED.

    Raises:
        ProfileError: no scrape has both ratios for the GPU, or some scrape attributes the GPU
            to more than one workload (the job did not run alone).
    """
    occ: list[float] = []
    dram: list[float] = []
    fb: list[float] = []
    for scrape in scrapes:
        r = _find(scrape, gpu)
        if r is None:
            continue
        if len(r.pods) > 1:
            raise ProfileError(
                f"GPU {gpu} ran {len(r.pods)} workloads ({', '.join(r.pods)}); a profile needs "
                "the job alone"
            )
        if r.sm_occupancy is not None and r.dram_active is not None:
            occ.append(r.sm_occupancy)
            dram.append(r.dram_active)
        if r.fb_used_mib is not None:
            fb.append(r.fb_used_mib)
    if not occ:
        raise ProfileError(
            f"no scrape has {SM_OCCUPANCY} and {DRAM_ACTIVE} for GPU {gpu} (enable the "
            "profiling fields in dcgm-exporter's collectors)"
        )
    memory = memory_mib if memory_mib is not None else int(round(max(fb))) if fb else 0
    return from_ratios(sum(occ) / len(occ), sum(dram) / len(dram), iteration_s, memory,
                       key=key, source="measured")
