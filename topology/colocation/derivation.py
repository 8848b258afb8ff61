"""How the shipped profile catalogs were derived from Tabrizian (2020) — every assumption here.

The thesis measured its five CIFAR-10 models (VGG-11/19, ResNet-18/50, SE-ResNet-18; batch
64/128/256) on a V100 but prints C (Eq. 4.3) and M (Eq. 4.2) only as bar charts (Figs. 4.8 and
4.10) and δ (Eq. 4.1) only as scatter plots. What the *text* states, and what this derivation
is held to (``tests/topology/colocation/test_catalog.py`` checks each):

1. C and M grow with the batch size for every model (§4.2.2, §4.2.3).
2. ResNet-50 has the highest C and M at every batch size; VGG-11 has "fewer kernels in almost
   every bucket" (§4.2.2-4.2.3) — the lowest.
3. With MPS, the sets that lose (δ < 1) are separable by ``ΣC ≤ 4·10⁷`` and all have batch 256
   (§4.2.4, Fig. 4.12).
4. The slowest experiments are the ones co-located with ResNet-50 (§4.2, Fig. 4.5 discussion);
   the largest speed-up falls as the batch grows (§4.2 first bullet).
5. SENet-18 + ResNet-18 at batch 256: δ = 1.02, and the classifier still accepts it (§6.3).
6. VGG-19, VGG-11 and ResNet-18 at batch 64 are "the models that have the largest gain from
   co-location" and sets with VGG-11 give the peaks (§6.2, §4.2); with two data workers
   (the thesis' job default, Listing 1) this holds in our catalog, see ``data/README.md``.
7. With two data workers, FIFO's worst-case makespan is about 25 % longer than with ten
   ("leads to 25% increase in makespan for large batch sizes", §6.3).

**Solo iteration time** ``t = max(g + o, batch / loader_rate)`` — GPU time plus framework
overhead, or the time the data loader needs per batch, whichever is longer (PyTorch's
DataLoader prefetches in parallel with training):

* ``g = 6 · MACs · batch / TFLOPS_eff`` (forward = 2 FLOPs per MAC, backward ≈ 2× forward);
  MACs of the CIFAR-10 variants (32×32 inputs) in :data:`GMAC_PER_IMAGE`, counted layer by
  layer; SE-ResNet-18's squeeze-excite kernels are memory-bound: ×1.15 time
  (:data:`SE_TIME_FACTOR`).
* effective FP32 throughput on a V100 (:data:`TFLOPS`): rising with batch with diminishing
  returns (Fig. 3.1), ResNet-50 lower (its 256-channel 32×32 stage is dominated by
  memory-bound BatchNorm/ReLU — it has the highest M, item 2).
* ``o``: per-iteration framework overhead (:data:`OVERHEAD_MS`), growing with layer count.
* loader rates (:data:`LOADER_IMAGES_PER_S`): ten workers 10 000 images/s, two workers
  2 100 images/s (random crop, flip, normalise of 32×32 images); the latter reproduces item 7.

**C and M** are kernel properties (Nsight Compute replays each kernel alone), so they do not
depend on the data loader: ``C = c₁₀ · 100 · 2 · t₁₀ · 10⁶`` where ``c₁₀`` is the job's
time-averaged warp residency under ten workers (:data:`OCCUPANCY_10W`) and ``t₁₀`` its ten-worker
iteration time; M likewise from :data:`DRAM_ACTIVE_10W`. The tables satisfy items 1-2, put the
batch-256 ResNet-18/SE-ResNet-18 pair at δ = 1.04 with ΣC = 1.7·10⁷ (item 5) and ResNet-50 at
batch 256 at C = 4.1·10⁷, alone past the threshold (items 3-4).

**GPU memory** ``600 MiB + 12 B/parameter + batch · activation MiB/image · 1.3``: CUDA context
and framework, weights + gradients + momentum (float32), and the tensors autograd saves per
32×32 image with 30 % allocator slack and cuDNN workspace. Estimates, not measurements.

Run ``python -m topology.colocation.derivation`` to rewrite ``data/*.yaml``; the test suite
fails when the shipped files and this module disagree.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from topology.colocation.profile import RATIO_SECOND_TO_UNITS

MODELS = ("vgg11", "vgg19", "resnet18", "se_resnet18", "resnet50")
BATCHES = (64, 128, 256)

#: Multiply-accumulates per 32×32 image, forward pass, GMAC (layer-by-layer count of the
#: CIFAR-10 variants: 3×3 convolutions, BN and shortcut projections; classifier negligible).
GMAC_PER_IMAGE = {"vgg11": 0.153, "vgg19": 0.399, "resnet18": 0.556, "se_resnet18": 0.557,
                  "resnet50": 1.30}
#: Parameters, millions (same networks).
PARAMS_M = {"vgg11": 9.23, "vgg19": 20.04, "resnet18": 11.17, "se_resnet18": 11.26,
            "resnet50": 23.52}
#: Activation memory autograd keeps per image, MiB (float32 tensors saved for backward).
ACTIVATION_MIB = {"vgg11": 2.0, "vgg19": 3.3, "resnet18": 4.6, "se_resnet18": 5.2,
                  "resnet50": 24.0}
#: Effective FP32 TFLOP/s on a V100 by batch size (Fig. 3.1: diminishing returns).
TFLOPS = {
    "vgg11": {64: 5.0, 128: 7.5, 256: 10.0},
    "vgg19": {64: 5.0, 128: 7.5, 256: 10.0},
    "resnet18": {64: 5.0, 128: 7.5, 256: 10.0},
    "se_resnet18": {64: 5.0, 128: 7.5, 256: 10.0},
    "resnet50": {64: 4.0, 128: 5.5, 256: 7.0},
}
#: Framework overhead per iteration (Python, launches, optimizer step), ms.
OVERHEAD_MS = {"vgg11": 2.0, "vgg19": 3.0, "resnet18": 4.0, "se_resnet18": 6.0,
               "resnet50": 8.0}
#: SE-ResNet-18 runs ResNet-18's convolutions plus memory-bound squeeze-excite kernels.
SE_TIME_FACTOR = 1.15
#: Images/s the data loader produces, by number of workers.
LOADER_IMAGES_PER_S = {10: 10_000.0, 2: 2_100.0}
#: Time-averaged warp residency of the job alone with ten workers (what DCGM_FI_PROF_SM_OCCUPANCY
#: would read), by batch 64/128/256. Far from the predictor's saturation (0.5) at 64-128 (MPS
#: shows no slow-down below batch 256, §4.2.4); ResNet-18/SE-ResNet-18 at 256 near it (the
#: δ = 1.02 pair, §6.3); ResNet-50 at 256 beyond it (highest C, Fig. 4.10).
OCCUPANCY_10W = {
    "vgg11": (0.05, 0.08, 0.125),
    "vgg19": (0.08, 0.14, 0.25),
    "resnet18": (0.10, 0.20, 0.44),
    "se_resnet18": (0.11, 0.21, 0.45),
    "resnet50": (0.20, 0.35, 0.70),
}
#: Time-averaged DRAM-active ratio with ten workers (DCGM_FI_PROF_DRAM_ACTIVE), same layout.
#: Correlated with occupancy (§4.2.3: "C and M are correlated"); SE-ResNet-18 above
#: ResNet-18 (squeeze-excite), ResNet-50 highest ("almost fully utilize the V100 bandwidth").
DRAM_ACTIVE_10W = {
    "vgg11": (0.04, 0.065, 0.10),
    "vgg19": (0.06, 0.11, 0.20),
    "resnet18": (0.09, 0.175, 0.375),
    "se_resnet18": (0.12, 0.225, 0.45),
    "resnet50": (0.225, 0.375, 0.70),
}
GPU_NAME = "Tesla V100 16 GB (Tabrizian §6.1)"
CONTEXT_MIB = 600.0
SLACK = 1.3


@dataclass(frozen=True)
class Derived:
    """One derived profile and the arithmetic behind it."""

    key: str
    iteration_s: float
    kernel_occupancy: float
    mem_bandwidth_util: float
    gpu_memory_mib: int
    note: str


def gpu_ms(model: str, batch: int) -> float:
    """GPU time + framework overhead of one iteration, ms (module docstring)."""
    g = 6.0 * GMAC_PER_IMAGE[model] * batch / TFLOPS[model][batch]
    if model == "se_resnet18":
        g *= SE_TIME_FACTOR
    return g + OVERHEAD_MS[model]


def iteration_ms(model: str, batch: int, workers: int) -> float:
    """Solo iteration time, ms: ``max(g + o, batch / loader rate)``."""
    return max(gpu_ms(model, batch), 1000.0 * batch / LOADER_IMAGES_PER_S[workers])


def memory_mib(model: str, batch: int) -> int:
    """GPU memory estimate, MiB (module docstring)."""
    weights = PARAMS_M[model] * 1e6 * 12 / 2**20
    return int(round(CONTEXT_MIB + weights + batch * ACTIVATION_MIB[model] * SLACK))


def derive(model: str, batch: int, workers: int) -> Derived:
    """The profile of ``model`` at ``batch`` with ``workers`` data workers."""
    i = BATCHES.index(batch)
    t10 = iteration_ms(model, batch, 10) / 1000.0
    t = iteration_ms(model, batch, workers) / 1000.0
    c10, m10 = OCCUPANCY_10W[model][i], DRAM_ACTIVE_10W[model][i]
    c_units = c10 * RATIO_SECOND_TO_UNITS * t10
    m_units = m10 * RATIO_SECOND_TO_UNITS * t10
    g = gpu_ms(model, batch)
    load_ms = 1000.0 * batch / LOADER_IMAGES_PER_S[workers]
    bound = "GPU" if g >= load_ms else "loader"
    note = (
        f"t = max(GPU {g:.1f} ms, loader {load_ms:.1f} ms) = {t * 1000:.1f} ms ({bound}-bound, "
        f"{workers} workers); C = {c10:g} x 100 x 2 x {t10 * 1e6:.0f} us; "
        f"M = {m10:g} x 100 x 2 x {t10 * 1e6:.0f} us; memory = "
        f"{CONTEXT_MIB:.0f} + {PARAMS_M[model]}M params x 12 B + {batch} x "
        f"{ACTIVATION_MIB[model]} MiB x {SLACK}"
    )
    return Derived(f"{model}:{batch}", round(t, 5), round(c_units, -2), round(m_units, -2),
                   memory_mib(model, batch), note)


CATALOGS = {"v100-cifar10-w10": 10, "v100-cifar10-w2": 2}

#: Tabrizian Table 4.1: the experiments (co-location of 2 and of 3), by experiment number.
TABLE_4_1_PAIRS = (
    ("vgg19", "resnet50"), ("se_resnet18", "resnet50"), ("vgg11", "vgg19"),
    ("resnet18", "resnet50"), ("vgg11", "resnet50"), ("resnet18", "vgg11"),
    ("vgg19", "se_resnet18"), ("vgg11", "se_resnet18"), ("resnet18", "se_resnet18"),
    ("resnet18", "vgg19"),
)
TABLE_4_1_TRIPLES = (
    ("resnet18", "se_resnet18", "resnet50"), ("resnet18", "vgg19", "resnet50"),
    ("resnet18", "vgg11", "se_resnet18"), ("resnet18", "vgg11", "vgg19"),
    ("resnet18", "vgg19", "se_resnet18"), ("vgg11", "se_resnet18", "resnet50"),
    ("resnet18", "vgg11", "resnet50"), ("vgg11", "vgg19", "se_resnet18"),
    ("vgg11", "vgg19", "resnet50"), ("vgg19", "se_resnet18", "resnet50"),
)


def render(name: str) -> str:
    """The YAML text of a shipped catalog (with each entry's arithmetic as a comment)."""
    workers = CATALOGS[name]
    lines = [
        "# Generated by `python -m topology.colocation.derivation` -- do not edit by hand;",
        "# every number's reasoning is in topology/colocation/derivation.py and data/README.md.",
        "# Replace or extend it with your own measurements: same schema, a file or a ConfigMap.",
        "apiVersion: gputopo.io/v1",
        "kind: ColocationProfiles",
        "metadata:",
        f"  name: {name}",
        "  description: >-",
        f"    Tabrizian (2020) CIFAR-10 training jobs on one V100, {workers} data workers;",
        "    derived from the thesis' text (its C/M figures are not printed), not measured.",
        f"  gpu: {GPU_NAME}",
        "  units:",
        "    iteration_s: seconds per training iteration, job alone (Eq. 4.1 t_j)",
        "    kernel_occupancy: Eq. 4.3 C = sum q_i t_i, percent x microseconds, 2 iterations",
        "    mem_bandwidth_util: Eq. 4.2 M = sum p_i t_i, percent x microseconds, 2 iterations",
        "    gpu_memory_mib: MiB",
        "profiles:",
    ]
    for model in MODELS:
        for batch in BATCHES:
            d = derive(model, batch, workers)
            lines += [
                f"  # {d.note}",
                f"  {d.key}:",
                f"    iteration_s: {d.iteration_s}",
                f"    kernel_occupancy: {d.kernel_occupancy:.6g}",
                f"    mem_bandwidth_util: {d.mem_bandwidth_util:.6g}",
                f"    gpu_memory_mib: {d.gpu_memory_mib}",
                f"    source: derived ({name})",
            ]
    return "\n".join(lines) + "\n"


def experiments(workers: int) -> list[tuple[int, int, int, tuple[str, ...], float, float]]:
    """Every Table 4.1 experiment at every batch size, with the predictor's δ and ΣC:
    ``(batch, set size, experiment number, models, δ, ΣC)``."""
    from topology.colocation.model import predict
    from topology.colocation.profile import JobProfile

    out = []
    for batch in BATCHES:
        for size, table in ((2, TABLE_4_1_PAIRS), (3, TABLE_4_1_TRIPLES)):
            for number, models in enumerate(table):
                profs = []
                for m in models:
                    d = derive(m, batch, workers)
                    profs.append(JobProfile(d.iteration_s, d.kernel_occupancy,
                                            d.mem_bandwidth_util, d.gpu_memory_mib))
                p = predict(profs)
                out.append((batch, size, number, models, p.delta, p.sum_c))
    return out


def render_readme() -> str:
    """``data/README.md``: the derivation, the catalogs and the predictor's δ for Table 4.1."""
    from topology.colocation.model import DEFAULT_MODEL, DEFAULT_THRESHOLD

    short = {"vgg11": "VGG-11", "vgg19": "VGG-19", "resnet18": "ResNet-18",
             "se_resnet18": "SE-ResNet-18", "resnet50": "ResNet-50"}
    lines = [
        "# The shipped co-location profile catalogs",
        "",
        "Generated by `python -m topology.colocation.derivation` from the assumptions in",
        "[`derivation.py`](../derivation.py); the test suite fails when this file, the YAML",
        "catalogs and the module disagree. The thesis (Tabrizian 2020) measured these jobs but",
        "printed C and M only as bar charts (Figs. 4.8, 4.10) and δ only as scatter plots, so",
        "**the numbers below are derived from what its text states, not measured.** Replace",
        "them with your own (`gputopo.io/profile` keys in a file or ConfigMap of the same",
        "schema, or measured with dcgm-exporter).",
        "",
        "Units: t = solo iteration time; C (Eq. 4.3) and M (Eq. 4.2) in percent x microseconds",
        "summed over two training iterations (the window of Figs. 4.7/4.9). Predictor",
        f"constants: q_sat = {DEFAULT_MODEL.q_sat}, p_sat = {DEFAULT_MODEL.p_sat}, "
        f"interference = {DEFAULT_MODEL.interference};",
        f"threshold {DEFAULT_THRESHOLD:.0e} (§4.2.4).",
        "",
        "## Inputs and their reasons",
        "",
        "| model | GMAC/image | params (M) | activation MiB/image | TFLOP/s at 64/128/256 | "
        "overhead ms | SM occupancy (10 workers) 64/128/256 | DRAM active 64/128/256 |",
        "|---|---:|---:|---:|---|---:|---|---|",
    ]
    for m in MODELS:
        tf = "/".join(f"{TFLOPS[m][b]:g}" for b in BATCHES)
        occ = "/".join(f"{v:g}" for v in OCCUPANCY_10W[m])
        dram = "/".join(f"{v:g}" for v in DRAM_ACTIVE_10W[m])
        lines.append(f"| {short[m]} | {GMAC_PER_IMAGE[m]} | {PARAMS_M[m]} | "
                     f"{ACTIVATION_MIB[m]} | {tf} | {OVERHEAD_MS[m]:g} | {occ} | {dram} |")
    lines += [
        "",
        "* **GMAC, parameters** — layer-by-layer counts of the CIFAR-10 variants (32×32 input).",
        "* **TFLOP/s** — effective V100 FP32 throughput rising with batch with diminishing",
        "  returns (Fig. 3.1); ResNet-50 lower: its 256-channel 32×32 stage is dominated by",
        "  memory-bound BatchNorm/ReLU (it has the highest M, §4.2.2).",
        f"* **SE-ResNet-18** — ResNet-18's convolutions ×{SE_TIME_FACTOR} for the memory-bound",
        "  squeeze-excite kernels.",
        "* **Loader** — 10 workers: 10 000 images/s; 2 workers: 2 100 images/s, which makes",
        "  FIFO's batch-256 makespan ~25 % longer than with 10 workers (§6.3).",
        "* **SM occupancy, DRAM active** — time-averaged ratios of the job alone (what DCGM would",
        "  report): growing with batch (§4.2.2-4.2.3), ResNet-50 highest and VGG-11 lowest at",
        "  every batch, SE-ResNet-18 more memory-bound than ResNet-18; far below the predictor's",
        "  saturation (0.5) at batch 64/128 (MPS showed no slow-down there, §4.2.4), ResNet-18",
        "  and SE-ResNet-18 near it at 256 (their pair: δ = 1.02, §6.3), ResNet-50 beyond it at",
        "  256 (its C alone reaches the 4·10⁷ line).",
        "* **Memory** — 600 MiB context + 12 B/parameter + batch × activation MiB × 1.3.",
        "",
    ]
    for name, workers in CATALOGS.items():
        lines += [f"## `{name}` ({workers} data workers)", "",
                  "| key | t (ms) | bound by | C | M | memory MiB |",
                  "|---|---:|---|---:|---:|---:|"]
        for m in MODELS:
            for b in BATCHES:
                d = derive(m, b, workers)
                bound = "GPU" if gpu_ms(m, b) >= 1000.0 * b / LOADER_IMAGES_PER_S[workers] \
                    else "loader"
                lines.append(f"| {d.key} | {d.iteration_s * 1000:.1f} | {bound} | "
                             f"{d.kernel_occupancy:.3g} | {d.mem_bandwidth_util:.3g} | "
                             f"{d.gpu_memory_mib} |")
        lines.append("")
    lines += [
        "## Predicted δ of Table 4.1's experiments",
        "",
        "Eq. 4.1's δ from the predictor (`topology/colocation/model.py`) for every",
        "experiment of Table 4.1 (2 and 3 jobs of one batch size), and ΣC. **bold** = the set",
        "loses (δ < 1); † = above the ΣC threshold.",
        "",
    ]
    for name, workers in CATALOGS.items():
        lines += [f"### `{name}`", "",
                  "| batch | jobs | " + " | ".join(str(i) for i in range(10)) + " |",
                  "|---:|---:|" + "---:|" * 10]
        rows: dict[tuple[int, int], list[str]] = {}
        for batch, size, _number, _models, delta, sum_c in experiments(workers):
            cell = f"{delta:.2f}"
            if delta < 1:
                cell = f"**{cell}**"
            if sum_c > DEFAULT_THRESHOLD:
                cell += "†"
            rows.setdefault((batch, size), []).append(cell)
        for (batch, size), cells in rows.items():
            lines.append(f"| {batch} | {size} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "Experiment numbers as in Table 4.1 (pairs: 0 = VGG-19+ResNet-50 … 9 = ResNet-18+"
        "VGG-19; triples: 0 = ResNet-18+SE-ResNet-18+ResNet-50 … 9 = VGG-19+SE-ResNet-18+"
        "ResNet-50).",
        "",
    ]
    return "\n".join(lines) + "\n"


def data_dir() -> Path:
    """Where the shipped catalogs live."""
    return Path(__file__).resolve().parent / "data"


def main() -> None:
    """Rewrite ``data/<catalog>.yaml`` for every shipped catalog (``--check`` compares)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    args = ap.parse_args()
    stale = []
    outputs = {f"{name}.yaml": render(name) for name in CATALOGS}
    outputs["README.md"] = render_readme()
    for fname, text in outputs.items():
        path = data_dir() / fname
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        raise SystemExit(f"stale: {', '.join(stale)}")


if __name__ == "__main__":
    main()
