"""Where a shared pod's profile comes from: annotations, catalogs, measurements, default."""

from __future__ import annotations

import pytest

from topology.colocation.model import DEFAULT_THRESHOLD, predict
from topology.colocation.profile import (
    JobProfile,
    ProfileCatalog,
    ProfileError,
    builtin_catalog,
)
from topology.colocation.sources import (
    ANN_ITERATION_MS,
    ANN_KERNEL_OCCUPANCY,
    ANN_MEM_BANDWIDTH_UTIL,
    ANN_PROFILE,
    DEFAULT_MEMORY_MIB,
    default_profile,
    profile_key,
    ratios_from_profile,
    resolve_profile,
)

CATALOG = builtin_catalog()
USER = ProfileCatalog.from_profiles("user", {
    "resnet18:64": JobProfile(0.03, 1.0e6, 8.0e5, 1500, key="resnet18:64", source="user"),
})
MEASURED = ProfileCatalog.from_profiles("measured", {
    "resnet18:64": JobProfile(0.05, 3.0e6, 3.0e6, 2000, key="resnet18:64", source="measured"),
    "bert:32": JobProfile(0.2, 2.0e7, 1.5e7, 9000, key="bert:32", source="measured"),
})


def test_catalog_key() -> None:
    p = resolve_profile({ANN_PROFILE: "ResNet18:64"}, catalog=CATALOG)
    assert p == CATALOG["resnet18:64"] and p.source == "catalog"


def test_user_catalog_beats_shipped_beats_measured() -> None:
    p = resolve_profile({ANN_PROFILE: "resnet18:64"}, catalog=CATALOG, user=USER,
                        measured=MEASURED)
    assert p.source == "user" and p.iteration_s == 0.03
    p = resolve_profile({ANN_PROFILE: "resnet18:64"}, catalog=CATALOG, measured=MEASURED)
    assert p.source == "catalog"
    p = resolve_profile({ANN_PROFILE: "bert:32"}, catalog=CATALOG, user=USER,
                        measured=MEASURED)
    assert p.source == "measured" and p.gpu_memory_mib == 9000


def test_explicit_annotations_win_and_fill_from_the_key() -> None:
    ann = {ANN_PROFILE: "resnet18:64", ANN_KERNEL_OCCUPANCY: "5e6"}
    p = resolve_profile(ann, catalog=CATALOG)
    base = CATALOG["resnet18:64"]
    assert p.source == "annotation" and p.kernel_occupancy == 5e6
    assert p.mem_bandwidth_util == base.mem_bandwidth_util
    assert p.iteration_s == base.iteration_s and p.gpu_memory_mib == base.gpu_memory_mib
    ann = {ANN_KERNEL_OCCUPANCY: "5e6", ANN_MEM_BANDWIDTH_UTIL: "4e6", ANN_ITERATION_MS: "40"}
    p = resolve_profile(ann, catalog=CATALOG)
    assert (p.iteration_s, p.kernel_occupancy, p.mem_bandwidth_util) == (0.04, 5e6, 4e6)
    assert p.gpu_memory_mib == DEFAULT_MEMORY_MIB and p.key is None


def test_memory_request_overrides_the_profile() -> None:
    p = resolve_profile({ANN_PROFILE: "vgg11:64"}, catalog=CATALOG, memory_request_mib=3072)
    assert p.gpu_memory_mib == 3072


@pytest.mark.parametrize("ann, message", [
    ({ANN_KERNEL_OCCUPANCY: "5e6"}, "mem-bandwidth-util missing"),
    ({ANN_KERNEL_OCCUPANCY: "5e6", ANN_MEM_BANDWIDTH_UTIL: "1e6"}, "iteration-time-ms missing"),
    ({ANN_ITERATION_MS: "30"}, "kernel-occupancy and"),
    ({ANN_KERNEL_OCCUPANCY: "lots"}, "not a number"),
    ({ANN_KERNEL_OCCUPANCY: "-3"}, ">= 0"),
    ({ANN_KERNEL_OCCUPANCY: "inf"}, "finite"),
    ({ANN_PROFILE: "resnet18"}, "<model>:<batch>"),
    ({ANN_PROFILE: "resnet18:64", ANN_ITERATION_MS: "0"}, "> 0"),
])
def test_bad_annotations(ann: dict[str, str], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        resolve_profile(ann, catalog=CATALOG)


def test_no_profile_gets_the_conservative_default() -> None:
    p = resolve_profile({}, catalog=CATALOG)
    assert p.source == "default" and p == default_profile()
    assert p.kernel_occupancy == pytest.approx(7 / 8 * DEFAULT_THRESHOLD)
    unknown = resolve_profile({ANN_PROFILE: "mystery:8"}, catalog=CATALOG)
    assert unknown.source == "default" and unknown.key == "mystery:8"
    # it fills the GPU: both time-averaged ratios above 1 (read as 1 by the model)
    c, m = ratios_from_profile(p)
    assert c >= 1 and m >= 1
    assert profile_key({}) is None


def heavy(p: JobProfile) -> bool:
    """A job is heavy when it saturates or nearly saturates a V100 alone (batch-256
    ResNet-18/SE-ResNet-18, any ResNet-50): C above 1/8 of the threshold."""
    return p.kernel_occupancy > DEFAULT_THRESHOLD / 8


@pytest.mark.parametrize("catalog", ["v100-cifar10-w10", "v100-cifar10-w2"])
def test_default_is_never_co_located_with_a_heavy_job(catalog: str) -> None:
    cat = builtin_catalog(catalog)
    d = default_profile()
    heavy_keys = {k for k, p in cat.items() if heavy(p)}
    assert heavy_keys >= {"resnet18:256", "se_resnet18:256", "resnet50:64", "resnet50:128",
                          "resnet50:256"}
    for key in heavy_keys:
        assert d.kernel_occupancy + cat[key].kernel_occupancy > DEFAULT_THRESHOLD, key
    # and it may share with some light jobs (δ ≥ 1 and under the threshold)
    light_ok = [k for k, p in cat.items() if not heavy(p)
                and predict([d, p]).delta >= 1
                and d.kernel_occupancy + p.kernel_occupancy <= DEFAULT_THRESHOLD]
    assert "vgg11:64" in light_ok


def test_default_scales_with_the_threshold() -> None:
    assert default_profile(8e7).kernel_occupancy == pytest.approx(7e7)
