"""Measured profiles from dcgm-exporter's exposition text (its GPU template's label set)."""

from __future__ import annotations

import pytest

from topology.colocation.dcgm import GPUReading, measured_profile, parse_exposition
from topology.colocation.model import occupancy_ratio
from topology.colocation.profile import ProfileError

UUID0 = "GPU-6d3f2a10-1c2b-4e5f-8a9b-0c1d2e3f4a5b"
UUID1 = "GPU-8e1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"


def exposition(occ0: float, dram0: float, occ1: float = 0.0, dram1: float = 0.0,
               pod0: str = "train-0", extra_pod: str = "") -> str:
    """One dcgm-exporter scrape of a 2-GPU node, as its GPU template renders it."""
    def labels(gpu: int, uuid: str, bus: str, pod: str) -> str:
        ns = "ml" if pod else ""
        container = "main" if pod else ""
        return (f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="{bus}",device="nvidia{gpu}",'
                f'modelName="Tesla V100-SXM2-16GB",Hostname="gpu-node-1",'
                f'DCGM_FI_DRIVER_VERSION="535.104.05",container="{container}",'
                f'namespace="{ns}",pod="{pod}"')
    l0 = labels(0, UUID0, "00000000:06:00.0", pod0)
    l1 = labels(1, UUID1, "00000000:07:00.0", "")
    lines = [
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
        f"DCGM_FI_DEV_SM_CLOCK{{{l0}}} 1530",
        f"DCGM_FI_DEV_SM_CLOCK{{{l1}}} 135",
        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
        f"DCGM_FI_DEV_FB_USED{{{l0}}} 1843",
        f"DCGM_FI_DEV_FB_USED{{{l1}}} 0",
        "# HELP DCGM_FI_PROF_SM_OCCUPANCY The ratio of number of warps resident on an SM.",
        "# TYPE DCGM_FI_PROF_SM_OCCUPANCY gauge",
        f"DCGM_FI_PROF_SM_OCCUPANCY{{{l0}}} {occ0:.6f}",
        f"DCGM_FI_PROF_SM_OCCUPANCY{{{l1}}} {occ1:.6f}",
        "# HELP DCGM_FI_PROF_DRAM_ACTIVE Ratio of cycles the device memory interface is "
        "active sending or receiving data.",
        "# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge",
        f"DCGM_FI_PROF_DRAM_ACTIVE{{{l0}}} {dram0:.6f}",
        f"DCGM_FI_PROF_DRAM_ACTIVE{{{l1}}} {dram1:.6f}",
    ]
    if extra_pod:
        other = l0.replace('pod="train-0"', f'pod="{extra_pod}"')
        lines.append(f"DCGM_FI_PROF_SM_OCCUPANCY{{{other}}} {occ0:.6f}")
    return "\n".join(lines) + "\n"


def test_parse_one_scrape() -> None:
    r = parse_exposition(exposition(0.35, 0.2))
    assert set(r) == {0, 1}
    g0 = r[0]
    assert isinstance(g0, GPUReading)
    assert (g0.uuid, g0.pci_bus_id, g0.device, g0.model_name, g0.hostname) == (
        UUID0, "00000000:06:00.0", "nvidia0", "Tesla V100-SXM2-16GB", "gpu-node-1")
    assert g0.pods == ("ml/train-0/main",)
    assert (g0.sm_occupancy, g0.dram_active, g0.fb_used_mib) == (0.35, 0.2, 1843)
    assert r[1].pods == () and r[1].sm_occupancy == 0.0


def test_measured_profile_averages_a_window() -> None:
    scrapes = [parse_exposition(exposition(o, d)) for o, d in
               [(0.30, 0.18), (0.40, 0.22), (0.35, 0.20)]]
    p = measured_profile(scrapes, 0, iteration_s=0.05, key="resnet18:64")
    # C = mean occupancy 0.35 × 100 × 2 iterations × 50 000 µs = 3.5e6 (Eq. 4.3 units)
    assert p.kernel_occupancy == pytest.approx(3.5e6)
    assert p.mem_bandwidth_util == pytest.approx(2.0e6)
    assert p.gpu_memory_mib == 1843 and p.source == "measured" and p.key == "resnet18:64"
    assert occupancy_ratio(p) == pytest.approx(0.35)
    by_uuid = measured_profile(scrapes, UUID0, iteration_s=0.05, memory_mib=2048)
    assert by_uuid.kernel_occupancy == pytest.approx(3.5e6) and by_uuid.gpu_memory_mib == 2048


def test_a_profile_needs_the_job_alone() -> None:
    scrapes = [parse_exposition(exposition(0.3, 0.2, extra_pod="other-1"))]
    with pytest.raises(ProfileError, match="alone"):
        measured_profile(scrapes, 0, iteration_s=0.05)


def test_missing_fields_and_gpus() -> None:
    text = exposition(0.3, 0.2).split("# HELP DCGM_FI_PROF_SM_OCCUPANCY")[0]
    with pytest.raises(ProfileError, match="enable the profiling fields"):
        measured_profile([parse_exposition(text)], 0, iteration_s=0.05)
    with pytest.raises(ProfileError, match="no scrape"):
        measured_profile([parse_exposition(exposition(0.3, 0.2))], 7, iteration_s=0.05)


def test_mig_instances_are_skipped() -> None:
    text = ('DCGM_FI_PROF_SM_OCCUPANCY{gpu="0",UUID="GPU-a",pci_bus_id="",device="nvidia0",'
            'modelName="A100",GPU_I_PROFILE="1g.5gb",GPU_I_ID="7",Hostname="h"} 0.5\n')
    assert parse_exposition(text) == {}


@pytest.mark.parametrize("text, message", [
    ("DCGM_FI_PROF_SM_OCCUPANCY{gpu=\"0\" 0.5\n", "exposition"),
    ('DCGM_FI_PROF_SM_OCCUPANCY{gpu="x",UUID="u"} 0.5\n', "numeric gpu"),
    ('DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="u"} 1.5\n', "ratio"),
])
def test_bad_text(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_exposition(text)
