"""``gputopo topology``: show a machine's model and access-cost tree, list the catalog,
print the annotation JSON Schema."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gputopo_cli.common import fail
from topology.model import Topology, TopologyError, format_cpu_list


def render_model(topo: Topology) -> str:
    """A human-readable matrix: NV# for NVLinked pairs, the PCIe level otherwise, plus each
    GPU's NUMA node and CPUs."""
    n = topo.size
    head = "      " + "".join(f"GPU{j:<4}" for j in range(n)) + "NUMA  CPU affinity"
    memories = {g.memory_mib for g in topo.gpus}
    memory = (
        "memory unknown" if memories == {0}
        else f"{memories.pop()} MiB" if len(memories) == 1
        else "memory " + "/".join(str(g.memory_mib or "?") for g in topo.gpus) + " MiB"
    )
    lines = [
        f"{topo.name}: {n} x {topo.gpus[0].name or 'GPU'} ({memory})"
        f"{', NVSwitch' if topo.nvswitch else ''}, NVLink gen {topo.nvlink_generation}, "
        f"class {topo.topology_class}",
        head,
    ]
    for i in range(n):
        cells = ["X" if i == j else topo.links[i][j].label for j in range(n)]
        g = topo.gpus[i]
        numa = "-" if g.numa_node is None else str(g.numa_node)
        lines.append(
            f"GPU{i:<3}" + "".join(f"{c:<7}" for c in cells)
            + f"{numa:<6}{format_cpu_list(g.cpu_affinity) or '-'}"
        )
    bw = topo.bandwidths
    lines.append(
        f"link bandwidth: NVLink {bw.nvlink(topo.nvlink_generation):g} GB/s per link, "
        f"PCIe {bw.pcie_gbps.get(next(iter(bw.pcie_gbps))):g} GB/s (MAPA Table 1)"
    )
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    """Add the ``topology`` command group."""
    group = typer.Typer(help="Inspect topologies: show, list the catalog, print the schema.",
                        no_args_is_help=True)

    @group.command("show")
    def show(
        src: Annotated[str, typer.Argument(help="catalog name, topology JSON/YAML file, or saved `nvidia-smi topo -m` output")],
        output: Annotated[str, typer.Option("--output", "-o", help="table | json (json = exactly the gputopo.io/topology annotation)")] = "table",
        gpu_memory_mib: Annotated[int | None, typer.Option(help="MiB of GPUs whose memory the source does not give and the catalog does not know (as the device plugin's --gpu-memory-mib)")] = None,
        gpu_model: Annotated[str | None, typer.Option(help="catalog GPU model of GPUs the source names none for (a `nvidia-smi topo -m` text), e.g. 'Tesla V100-SXM2-16GB': its name and memory are used (as the device plugin's --gpu-model)")] = None,
    ) -> None:
        """Print the model and the Gaia access-cost tree (or the annotation JSON: exactly what
        `gputopo device-plugin --fake-topology SRC` publishes)."""
        from topology.serialization import dumps
        from topology.sources import describe_memory, load_topology

        if output not in ("json", "table"):
            fail(f"--output must be json or table, got {output!r}")
        if gpu_memory_mib is not None and gpu_memory_mib <= 0:
            fail(f"--gpu-memory-mib must be a positive number of MiB, got {gpu_memory_mib}")
        try:
            topo = load_topology(src, gpu_memory_mib=gpu_memory_mib, gpu_model=gpu_model)
        except (TopologyError, OSError) as exc:
            fail(str(exc))
        memory = describe_memory(src, topo, gpu_memory_mib=gpu_memory_mib, gpu_model=gpu_model)
        if output == "json":
            typer.echo(dumps(topo))
            typer.echo(memory, err=True)
            return
        from topology.policies.gaia import AccessCostTree

        typer.echo(render_model(topo))
        typer.echo(memory)
        typer.echo("\naccess-cost tree (Gaia §III-B):")
        typer.echo(AccessCostTree.build(topo).render())

    @group.command("list")
    def list_(
        models: Annotated[bool, typer.Option("--models", help="list the catalog's GPU models and their memory instead (the values --gpu-model takes)")] = False,
    ) -> None:
        """List the catalog machines (or, with --models, GPU models)."""
        from topology import catalog

        if models:
            for model, mib in sorted(catalog.gpu_models().items()):
                typer.echo(f"{model:<28} {mib} MiB")
            return
        for name in catalog.names():
            typer.echo(f"{name:<20} {catalog.describe(name)}")

    @group.command("schema")
    def schema() -> None:
        """Print the JSON Schema of the gputopo.io/topology annotation."""
        from topology.serialization import json_schema

        typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))

    app.add_typer(group, name="topology")
