"""The shipped profile catalogs: schema, provenance, and what Tabrizian's text states."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from topology.colocation import derivation
from topology.colocation.model import DEFAULT_THRESHOLD, predict
from topology.colocation.profile import (
    BUILTIN_CATALOGS,
    DEFAULT_CATALOG,
    JobProfile,
    ProfileCatalog,
    ProfileError,
    builtin_catalog,
    load_catalog_file,
    load_catalog_text,
    parse_profile_key,
    resolve_catalog,
)

W10 = builtin_catalog("v100-cifar10-w10")
W2 = builtin_catalog("v100-cifar10-w2")
MODELS = derivation.MODELS
BATCHES = derivation.BATCHES


def test_shipped_files_match_the_derivation() -> None:
    """Every number in data/*.yaml and data/README.md comes from derivation.py."""
    for name in derivation.CATALOGS:
        path = derivation.data_dir() / f"{name}.yaml"
        assert path.read_text() == derivation.render(name), f"regenerate {path}"
    assert (derivation.data_dir() / "README.md").read_text() == derivation.render_readme()


def test_every_entry_documents_its_arithmetic() -> None:
    text = (derivation.data_dir() / "v100-cifar10-w10.yaml").read_text()
    for model in MODELS:
        for batch in BATCHES:
            i = text.index(f"  {model}:{batch}:")
            comment = text[:i].rsplit("\n", 2)[-2]
            assert comment.strip().startswith("# t = max(GPU") and "C = " in comment


def test_catalogs_cover_the_thesis_jobs() -> None:
    assert DEFAULT_CATALOG == "v100-cifar10-w10" and set(BUILTIN_CATALOGS) == set(
        derivation.CATALOGS)
    for cat in (W10, W2):
        assert set(cat) == {f"{m}:{b}" for m in MODELS for b in BATCHES}
        assert all(p.source == "catalog" and p.key == k for k, p in cat.items())


@pytest.mark.parametrize("cat", [W10, W2], ids=["w10", "w2"])
def test_c_and_m_grow_with_batch(cat: ProfileCatalog) -> None:
    """§4.2.2/§4.2.3: "As we increase the batch size, the M [C] value increases"."""
    for m in MODELS:
        cs = [cat[f"{m}:{b}"].kernel_occupancy for b in BATCHES]
        ms = [cat[f"{m}:{b}"].mem_bandwidth_util for b in BATCHES]
        assert cs == sorted(cs) and len(set(cs)) == 3
        assert ms == sorted(ms) and len(set(ms)) == 3


@pytest.mark.parametrize("cat", [W10, W2], ids=["w10", "w2"])
def test_resnet50_highest_vgg11_lowest(cat: ProfileCatalog) -> None:
    """§4.2.2-4.2.3: ResNet-50 has the highest C and M; VGG-11 the fewest kernels."""
    for b in BATCHES:
        by_c = sorted(MODELS, key=lambda m: cat[f"{m}:{b}"].kernel_occupancy)
        by_m = sorted(MODELS, key=lambda m: cat[f"{m}:{b}"].mem_bandwidth_util)
        assert by_c[-1] == by_m[-1] == "resnet50"
        assert by_c[0] == by_m[0] == "vgg11"


def test_c_and_m_are_kernel_properties() -> None:
    """C and M do not depend on the data loader (Nsight Compute replays kernels alone); only
    the solo iteration time does."""
    for k in W10:
        assert W10[k].kernel_occupancy == W2[k].kernel_occupancy
        assert W10[k].mem_bandwidth_util == W2[k].mem_bandwidth_util
        assert W2[k].iteration_s >= W10[k].iteration_s


@pytest.mark.parametrize("workers", [10, 2])
def test_losing_sets_are_batch_256_above_the_threshold(workers: int) -> None:
    """§4.2.4, Fig. 4.12: with MPS the sets that lose are separated by ΣC ≤ 4·10⁷, and all
    of them have batch 256."""
    losers = [e for e in derivation.experiments(workers) if e[4] < 1.0 - 1e-9]
    assert losers  # the predictor does find losing sets
    for batch, _size, _n, models, _delta, sum_c in losers:
        assert batch == 256, models
        assert sum_c > DEFAULT_THRESHOLD, models


@pytest.mark.parametrize("workers", [10, 2])
def test_resnet50_sets_are_the_slowest(workers: int) -> None:
    """§4.2: "the experiments that are slowest, are the ones being co-located with
    ResNet-50" — at every batch size and set size."""
    exps = derivation.experiments(workers)
    for batch in BATCHES:
        for size in (2, 3):
            group = [e for e in exps if e[0] == batch and e[1] == size]
            slowest = min(group, key=lambda e: e[4])
            assert "resnet50" in slowest[3]


def test_largest_speedup_falls_with_batch() -> None:
    """§4.2, first bullet: "As we increase the batch size the largest speedup decreases"
    (the chapter-4 profiling setting, ten workers)."""
    exps = derivation.experiments(10)
    best = [max(e[4] for e in exps if e[0] == b) for b in BATCHES]
    assert best[0] > best[1] > best[2]


def test_three_jobs_gain_more_than_two_at_batch_64() -> None:
    """§4.2: "More than two jobs leads to higher speedup when using small batch sizes"."""
    for workers in (10, 2):
        exps = [e for e in derivation.experiments(workers) if e[0] == 64]
        two = [e[4] for e in exps if e[1] == 2]
        three = [e[4] for e in exps if e[1] == 3]
        assert sum(three) / len(three) > sum(two) / len(two)


def test_worst_case_pair() -> None:
    """§6.3: SENet-18 + ResNet-18 at batch 256: δ = 1.02, and the classifier still accepts
    the pair (ΣC ≤ 4·10⁷)."""
    p = predict([W10["se_resnet18:256"], W10["resnet18:256"]])
    assert 1.0 <= p.delta <= 1.06
    assert p.sum_c <= DEFAULT_THRESHOLD


def test_best_case_models_gain_most_with_two_workers() -> None:
    """§6.2: VGG-19, VGG-11 and ResNet-18 at batch 64 "have the largest gain from co-location
    in chapter 4", and the peaks are with VGG-11 (§4.2) — under two data workers, the
    thesis' job default (Listing 1)."""
    exps = [e for e in derivation.experiments(2) if e[0] == 64]
    best3 = max((e for e in exps if e[1] == 3), key=lambda e: e[4])
    assert set(best3[3]) == {"vgg19", "vgg11", "resnet18"}
    best2 = max((e for e in exps if e[1] == 2), key=lambda e: e[4])
    assert "vgg11" in best2[3]


def test_two_workers_stretch_fifo_by_a_quarter_at_batch_256() -> None:
    """§6.3: two data workers lead "to 25% increase in makespan for large batch sizes"
    (FIFO runs the worst case's jobs one after another)."""
    keys = ("se_resnet18:256", "resnet18:256")
    ratio = sum(W2[k].iteration_s for k in keys) / sum(W10[k].iteration_s for k in keys)
    assert 1.15 <= ratio <= 1.35


def test_resnet50_at_256_is_never_co_located_by_the_threshold() -> None:
    assert W10["resnet50:256"].kernel_occupancy > DEFAULT_THRESHOLD


# ------------------------------------------------------------------ keys and documents

def test_profile_keys() -> None:
    assert parse_profile_key(" ResNet18:64 ") == "resnet18:64"
    assert parse_profile_key("senet18:256") == "se_resnet18:256"
    assert parse_profile_key("my-model.v2:32") == "my-model.v2:32"
    for bad in ("resnet18", "resnet18:", ":64", "resnet18:0", "resnet18:-1", "resnet18:064",
                "a b:1", "resnet18:64:1", ""):
        with pytest.raises(ProfileError):
            parse_profile_key(bad)


USER = """
apiVersion: gputopo.io/v1
kind: ColocationProfiles
metadata: {name: my-lab}
profiles:
  resnet18:64: {iteration_s: 0.04, kernel_occupancy: 1.0e6, mem_bandwidth_util: 9.0e5,
                gpu_memory_mib: 1500, source: measured on our V100}
  bert-base:32: {iteration_s: 0.2, kernel_occupancy: 2.5e7, mem_bandwidth_util: 2.0e7,
                 gpu_memory_mib: 9000}
"""


def test_user_catalog_overlays_the_shipped_one(tmp_path: Path) -> None:
    user = load_catalog_text(USER, origin="configmap/my-lab")
    assert user.name == "my-lab" and user["ResNet18:64"].iteration_s == 0.04
    merged = W10.overlay(user)
    assert merged["resnet18:64"] == user["resnet18:64"]  # replaced
    assert merged["vgg11:64"] == W10["vgg11:64"]  # kept
    assert "bert-base:32" in merged and "nope:1" not in merged and 3 not in merged  # type: ignore[operator]
    f = tmp_path / "profiles.yaml"
    f.write_text(USER)
    assert load_catalog_file(f)["bert-base:32"].gpu_memory_mib == 9000
    assert resolve_catalog(str(f)).name == "my-lab"
    assert resolve_catalog(None).name == DEFAULT_CATALOG
    assert resolve_catalog("v100-cifar10-w2") is W2


def test_catalog_round_trips_through_its_document() -> None:
    doc = W2.to_document()
    again = load_catalog_text(yaml.safe_dump(doc), source="catalog")
    assert {k: v.identity() for k, v in again.items()} == {k: v.identity()
                                                          for k, v in W2.items()}


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(kind="Profiles"), "kind"),
    (lambda d: d["profiles"]["resnet18:64"].update(iteration_s=0), "iteration_s"),
    (lambda d: d["profiles"]["resnet18:64"].update(kernel_occupancy=-1), "kernel_occupancy"),
    (lambda d: d["profiles"]["resnet18:64"].update(colour="red"), "colour"),
    (lambda d: d["profiles"].update({"resnet18": dict(d["profiles"]["resnet18:64"])}),
     "<model>:<batch>"),
    (lambda d: d["profiles"].update({"ResNet18:64": dict(d["profiles"]["resnet18:64"])}),
     "twice"),
    (lambda d: d.pop("metadata"), "metadata"),
])
def test_bad_documents_get_one_line_errors(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = yaml.safe_load(USER)
    mutate(doc)
    with pytest.raises(ProfileError) as err:
        load_catalog_text(yaml.safe_dump(doc), origin="cm/x")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("cm/x:")


def test_unreadable_and_unknown_catalogs() -> None:
    with pytest.raises(ProfileError, match="not YAML"):
        load_catalog_text("a: [", origin="x")
    with pytest.raises(ProfileError, match="cannot read"):
        load_catalog_file("/nonexistent/profiles.yaml")
    with pytest.raises(ProfileError, match="shipped"):
        resolve_catalog("v100-nope")
    with pytest.raises(ProfileError, match="shipped"):
        builtin_catalog("nope")


def test_profile_values_validated() -> None:
    with pytest.raises(ProfileError):
        JobProfile(0.0, 1.0, 1.0, 1)
    with pytest.raises(ProfileError):
        JobProfile(0.1, float("nan"), 1.0, 1)
    with pytest.raises(ProfileError):
        JobProfile(0.1, 1.0, 1.0, -1)
