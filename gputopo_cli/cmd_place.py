"""``gputopo place``: what would a policy do on a node, and why."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated

import typer

from gputopo_cli.common import EXIT_NO_FIT, fail
from topology.colocation.model import DEFAULT_SLOTS, DEFAULT_THRESHOLD
from topology.colocation.profile import JobProfile, ProfileError, parse_profile_key
from topology.model import TopologyError
from topology.patterns import PatternError, parse_pattern
from topology.policies.base import (
    FULL_CORE,
    MAX_GPUS_PER_REQUEST,
    GPUUsage,
    NodeState,
    NoFit,
    Request,
    RequestError,
    Resident,
    SharedRequest,
)
from topology.policies.evaluate import Evaluator
from topology.policies.registry import DEFAULT_POLICY, UnknownPolicy, get_policy


def parse_used(text: str, gpu_count: int) -> NodeState:
    """Parse ``--used``: ``0,4`` (whole GPUs) or ``0:0.5,1:0.7`` (fractions of a GPU).

    Raises:
        ValueError: a malformed item, an index outside the node, a fraction outside (0, 1].
    """
    usage: dict[int, GPUUsage] = {}
    if not text.strip():
        return NodeState()
    for item in text.split(","):
        item = item.strip()
        idx_text, _, frac_text = item.partition(":")
        try:
            idx = int(idx_text)
            frac = float(frac_text) if frac_text else 1.0
        except ValueError:
            raise ValueError(f"bad --used item {item!r}: expected INDEX or INDEX:FRACTION") from None
        if not 0 <= idx < gpu_count:
            raise ValueError(f"--used names GPU {idx}; the node has GPUs 0..{gpu_count - 1}")
        if not 0 < frac <= 1:
            raise ValueError(f"--used fraction for GPU {idx} must be in (0, 1], got {frac}")
        if idx in usage:
            raise ValueError(f"--used lists GPU {idx} twice")
        usage[idx] = GPUUsage(core_percent=round(frac * FULL_CORE))
    return NodeState(usage)


def parse_residents(text: str, gpu_count: int, catalog: Mapping[str, JobProfile],
                    state: NodeState) -> NodeState:
    """Add ``--residents`` to ``state``: ``GPU=KEY[+KEY...][,GPU=...]``, e.g.
    ``0=resnet18:64+vgg11:64,1=vgg19:64`` — the co-located jobs already on each GPU, by
    profile key (resolved in ``catalog``).

    Raises:
        ValueError: a malformed item, an unknown key, a GPU outside the node or also in
            ``--used``, more jobs than slots.
    """
    usage = dict(state.usage)
    for item in filter(None, (p.strip() for p in text.split(","))):
        gpu_text, sep, keys = item.partition("=")
        try:
            gpu = int(gpu_text)
        except ValueError:
            raise ValueError(f"bad --residents item {item!r}: expected GPU=KEY[+KEY...]") \
                from None
        if not sep or not keys.strip():
            raise ValueError(f"bad --residents item {item!r}: expected GPU=KEY[+KEY...]")
        if not 0 <= gpu < gpu_count:
            raise ValueError(f"--residents names GPU {gpu}; the node has GPUs "
                             f"0..{gpu_count - 1}")
        if gpu in usage:
            raise ValueError(f"GPU {gpu} is listed twice (--used or --residents)")
        residents = []
        for n, raw in enumerate(k.strip() for k in keys.split("+")):
            key = parse_profile_key(raw)
            if key not in catalog:
                raise ValueError(f"--residents: profile {key!r} is not in the catalog")
            prof = catalog[key]
            residents.append(Resident(f"gpu{gpu}-job{n}", prof, prof.gpu_memory_mib))
        if len(residents) > state.slots_per_gpu:
            raise ValueError(f"GPU {gpu} lists {len(residents)} jobs; it has "
                             f"{state.slots_per_gpu} slots")
        usage[gpu] = GPUUsage(residents=tuple(residents))
    return NodeState(usage, state.unhealthy, state.slots_per_gpu)


def _colocation_rows(c: dict[str, object]) -> list[tuple[str, object]]:
    chosen = c["chosen"]
    assert isinstance(chosen, dict)
    rows: list[tuple[str, object]] = [
        ("profile", f"{c['profile']} ({c['profile_source']}): C {c['kernel_occupancy']:.4g}, "
                    f"M {c['mem_bandwidth_util']:.4g}, t {c['iteration_s']} s, "
                    f"{c['memory_mib']} MiB"),
        ("residents", ", ".join(chosen["residents"]) or "none (idle GPU)"),
        ("sum of C", f"{chosen['sum_c_before']:.4g} -> {chosen['sum_c']:.4g} "
                     f"(threshold {c['threshold']:.4g}, Tabrizian §4.2.4)"),
        ("predicted delta", f"{chosen['delta']} (Eq. 4.1); slow-downs "
                            + ", ".join(f"{x:.2f}" for x in chosen["slowdowns"])),
        ("throughput gain", f"+{chosen['throughput_gain']} GPU"),
        ("free memory after", f"{chosen['free_memory_mib']} MiB"),
    ]
    ru = c.get("runner_up")
    if isinstance(ru, dict):
        rows.append(("runner-up", f"GPU {ru['gpu']}: residents "
                                  f"{', '.join(ru['residents']) or 'none'}; sum of C "
                                  f"{ru['sum_c']:.4g}, predicted delta {ru['delta']}"))
    return rows


def _table(d: dict[str, object]) -> str:
    rows = [
        ("policy", d["policy"]),
        ("gpus", ",".join(str(g) for g in d["gpus"])),  # type: ignore[attr-defined]
        ("uuids", "\n".ljust(27).join(d["uuids"])),  # type: ignore[arg-type]
        ("aggregated bandwidth", f"{d['aggregated_bandwidth_gbps']} GB/s (every pair)"),
        ("pattern bandwidth", f"{d['pattern_bandwidth_gbps']} GB/s (AggBW, Eq. 1)"),
        ("effective bandwidth", f"{d['effective_bandwidth_gbps']} GB/s ({d['bandwidth_model']})"),
        ("preserved bandwidth", f"{d['preserved_bandwidth_gbps']} GB/s (Eq. 3)"),
        ("access cost", d["access_cost"]),
        ("cpu affinity", d["cpu_affinity"] or "-"),
        ("numa nodes", ",".join(str(n) for n in d["numa_nodes"]) or "-"),  # type: ignore[attr-defined]
    ]
    if d.get("fractional"):
        rows.append(("share", f"{d['core_percent']}% core, {d['memory_mib']} MiB"))
    colo = d.get("colocation")
    if isinstance(colo, dict):
        rows = [r for r in rows if r[0] in ("policy", "gpus", "uuids", "cpu affinity",
                                            "numa nodes")]
        rows += _colocation_rows(colo)
        rows.append(("why", d["reason"]))
        return "\n".join(f"{k:<25}  {v}" for k, v in rows)
    ru = d.get("runner_up")
    if isinstance(ru, dict):
        rows.append(("runner-up", f"{ru['gpus']} EffBW {ru['effective_bandwidth_gbps']} GB/s, "
                                  f"PreservedBW {ru['preserved_bandwidth_gbps']} GB/s"))
    rows.append(("why", d["reason"]))
    return "\n".join(f"{k:<25}  {v}" for k, v in rows)


def register(app: typer.Typer) -> None:
    """Add ``place`` to the CLI."""

    @app.command()
    def place(
        topology: Annotated[str, typer.Option("--topology", "-t", help="catalog name, topology JSON/YAML file, or saved `nvidia-smi topo -m` output")],
        gpus: Annotated[float | None, typer.Option("--gpus", "-n", help="GPUs wanted: an integer, or a fraction below 1 (e.g. 0.3 = 30% of one GPU); 1 with --shared")] = None,
        used: Annotated[str, typer.Option("--used", help="busy GPUs: whole (0,4) or partly used (0:0.5,1:0.7)")] = "",
        pattern: Annotated[str | None, typer.Option("--pattern", help="ring | tree | all-to-all | pair | edge list 0-1,1-2 (default all-to-all)")] = None,
        sensitive: Annotated[bool | None, typer.Option("--bandwidth-sensitive/--bandwidth-insensitive", help="job bandwidth sensitivity (default: sensitive for multi-GPU)")] = None,
        memory_mib: Annotated[int, typer.Option("--memory-mib", min=0, help="GPU memory for a fractional request, MiB")] = 0,
        policy: Annotated[str, typer.Option("--policy", help="baseline | gaia | mapa-greedy | mapa-preserve | gputopo | colocate | exclusive | random-colocate | ...")] = DEFAULT_POLICY,
        output: Annotated[str, typer.Option("--output", "-o", help="json | table")] = "table",
        shared: Annotated[bool, typer.Option("--shared", help="ask for one co-location slot (gputopo.io/gpu-shared) and explain the co-location")] = False,
        profile: Annotated[str | None, typer.Option("--profile", help="the job's profile key <model>:<batch> (gputopo.io/profile), e.g. resnet18:64")] = None,
        kernel_occupancy: Annotated[float | None, typer.Option("--kernel-occupancy", help="C, Tabrizian Eq. 4.3 (percent x us over 2 iterations)")] = None,
        mem_bandwidth_util: Annotated[float | None, typer.Option("--mem-bandwidth-util", help="M, Tabrizian Eq. 4.2 (same units)")] = None,
        iteration_ms: Annotated[float | None, typer.Option("--iteration-ms", help="the job's solo iteration time, ms (with explicit C/M)")] = None,
        residents: Annotated[str, typer.Option("--residents", help="co-located jobs already on GPUs: GPU=KEY[+KEY...], e.g. 0=resnet18:64+vgg11:64,1=vgg19:64")] = "",
        profiles: Annotated[str | None, typer.Option("--profiles", help="profile catalog: v100-cifar10-w10 (default), v100-cifar10-w2, or a YAML/JSON file of the same schema")] = None,
        slots: Annotated[int, typer.Option("--slots", min=1, help="co-location slots per GPU")] = DEFAULT_SLOTS,
        threshold: Annotated[float, typer.Option("--threshold", help="co-location threshold on the sum of C (Tabrizian §4.2.4)")] = DEFAULT_THRESHOLD,
    ) -> None:
        """Show the GPU set a policy picks on a node, and why. Exit 1 if it cannot fit."""
        from topology.colocation.profile import resolve_catalog
        from topology.colocation.sources import (
            ANN_ITERATION_MS,
            ANN_KERNEL_OCCUPANCY,
            ANN_MEM_BANDWIDTH_UTIL,
            ANN_PROFILE,
            resolve_profile,
        )
        from topology.sources import load_topology

        if output not in ("json", "table"):
            fail(f"--output must be json or table, got {output!r}")
        try:
            get_policy(policy)
        except UnknownPolicy as exc:
            fail(str(exc))
        try:
            topo = load_topology(topology)
        except (TopologyError, OSError) as exc:
            fail(str(exc))
        try:
            catalog = resolve_catalog(profiles)
            state = parse_used(used, topo.size)
            state = NodeState(state.usage, state.unhealthy, slots)
            if residents.strip():
                state = parse_residents(residents, topo.size, catalog, state)
            if shared:
                if gpus not in (None, 1):
                    raise RequestError("--shared asks for one slot of one GPU; --gpus must be 1")
                if pattern is not None:
                    raise RequestError("--pattern does not apply to a co-location slot")
                if not threshold > 0:
                    raise RequestError("--threshold must be positive")
                annotations: dict[str, str] = {}
                if profile is not None:
                    annotations[ANN_PROFILE] = profile
                for ann, value in ((ANN_KERNEL_OCCUPANCY, kernel_occupancy),
                                   (ANN_MEM_BANDWIDTH_UTIL, mem_bandwidth_util),
                                   (ANN_ITERATION_MS, iteration_ms)):
                    if value is not None:
                        annotations[ann] = repr(value)
                prof = resolve_profile(annotations, catalog=catalog,
                                       memory_request_mib=memory_mib or None,
                                       threshold=threshold)
                request = Request(count=1, shared=SharedRequest(
                    prof, prof.gpu_memory_mib, name="job", threshold=threshold))
            elif any(v is not None for v in (profile, kernel_occupancy, mem_bandwidth_util,
                                             iteration_ms)):
                raise RequestError("--profile/--kernel-occupancy/--mem-bandwidth-util/"
                                   "--iteration-ms describe a co-located job: add --shared")
            elif gpus is None:
                raise RequestError("--gpus is required (or --shared)")
            elif not math.isfinite(gpus):
                raise RequestError(f"--gpus must be a number of GPUs, got {gpus:g}")
            elif gpus <= 0:
                raise RequestError(f"--gpus must be positive, got {gpus:g}")
            elif gpus < 1:
                if pattern is not None:
                    raise RequestError("--pattern needs a whole number of GPUs")
                request = Request.fraction(gpus, memory_mib=memory_mib)
            else:
                if gpus != int(gpus):
                    raise RequestError(f"--gpus must be an integer or a fraction below 1, got {gpus:g}")
                if gpus > MAX_GPUS_PER_REQUEST:  # before int(): 1e300 is a 301-digit integer
                    raise RequestError(f"--gpus {gpus:g}: no node has more than "
                                       f"{MAX_GPUS_PER_REQUEST} GPUs")
                count = int(gpus)
                pat = parse_pattern(pattern, count) if pattern is not None else None
                request = Request(count=count, pattern=pat, bandwidth_sensitive=sensitive)
        except (ValueError, PatternError, RequestError, ProfileError) as exc:
            fail(str(exc))
        try:
            decision = Evaluator().place(policy, topo, state, request)
        except NoFit as exc:
            fail(f"cannot place: {exc}", code=EXIT_NO_FIT)
        doc = decision.to_json()
        if output == "json":
            typer.echo(json.dumps(doc, indent=2))
        else:
            typer.echo(_table(doc))
