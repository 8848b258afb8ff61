"""``gputopo place``: what would a policy do on a node, and why."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gputopo_cli.common import EXIT_NO_FIT, fail
from topology.model import TopologyError
from topology.patterns import PatternError, parse_pattern
from topology.policies.base import FULL_CORE, GPUUsage, NodeState, NoFit, Request, RequestError
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
        gpus: Annotated[float, typer.Option("--gpus", "-n", help="GPUs wanted: an integer, or a fraction below 1 (e.g. 0.3 = 30% of one GPU)")],
        used: Annotated[str, typer.Option("--used", help="busy GPUs: whole (0,4) or partly used (0:0.5,1:0.7)")] = "",
        pattern: Annotated[str | None, typer.Option("--pattern", help="ring | tree | all-to-all | pair | edge list 0-1,1-2 (default all-to-all)")] = None,
        sensitive: Annotated[bool | None, typer.Option("--bandwidth-sensitive/--bandwidth-insensitive", help="job bandwidth sensitivity (default: sensitive for multi-GPU)")] = None,
        memory_mib: Annotated[int, typer.Option("--memory-mib", min=0, help="GPU memory for a fractional request, MiB")] = 0,
        policy: Annotated[str, typer.Option("--policy", help="baseline | gaia | mapa-greedy | mapa-preserve | gputopo")] = DEFAULT_POLICY,
        output: Annotated[str, typer.Option("--output", "-o", help="json | table")] = "table",
    ) -> None:
        """Show the GPU set a policy picks on a node, and why. Exit 1 if it cannot fit."""
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
            state = parse_used(used, topo.size)
            if gpus <= 0:
                raise RequestError(f"--gpus must be positive, got {gpus:g}")
            if gpus < 1:
                if pattern is not None:
                    raise RequestError("--pattern needs a whole number of GPUs")
                request = Request.fraction(gpus, memory_mib=memory_mib)
            else:
                if gpus != int(gpus):
                    raise RequestError(f"--gpus must be an integer or a fraction below 1, got {gpus:g}")
                count = int(gpus)
                pat = parse_pattern(pattern, count) if pattern is not None else None
                request = Request(count=count, pattern=pat, bandwidth_sensitive=sensitive)
        except (ValueError, PatternError, RequestError) as exc:
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
