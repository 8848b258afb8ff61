"""``gputopo simulate`` with a generated workload file: whatever one part of a single-node
(MAPA), multi-node (hierarchy, with gangs) or planning (ANDREAS) workload document holds, it
exits 0, 1 or 2 with one line on stderr — never a traceback. It found a multi-node file whose
``params`` was not a mapping reaching ``dict()`` (a ValueError traceback). (The hand-picked
cases and their messages are in ``tests/simulator/test_simulator_workloads.py``.)"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from typer.testing import CliRunner, Result

from gputopo_cli.main import app
from simulator.multinode_workloads import load_multinode_workload
from simulator.planning_workloads import load_planning_workload
from simulator.workloads import load_workload
from tests.damage import damaged, exits_cleanly

runner = CliRunner()

#: One small document of each kind, as ``DIR/workload.json`` writes it, and the policies run.
DOCS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "mapa": (load_workload("mapa:jobs=4").to_json(),
             ["-p", "gputopo,nvidia-best-effort", "-t", "dgx1-v100"]),
    "hierarchy": (load_multinode_workload("hierarchy:jobs=3").to_json(), ["-p", "gputopo"]),
    "andreas": (load_planning_workload("andreas-s1:jobs=3").to_json(), ["-p", "fifo,andreas"]),
}


def _invoke(doc: Any, args: list[str]) -> tuple[Result, Path]:
    """``gputopo simulate`` on ``doc`` written to a file (the result, and the file's path)."""
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "w.json"
        f.write_text(json.dumps(doc))
        return runner.invoke(app, ["simulate", "-w", str(f), "-o", str(Path(d) / "out"),
                                   "--no-plots", *args]), f


def _simulate(doc: Any, args: list[str]) -> None:
    exits_cleanly(_invoke(doc, args)[0])


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_each_seed_document_simulates(kind: str) -> None:
    """The undamaged documents run (else the generated cases test only the refusals)."""
    r, _ = _invoke(*DOCS[kind])
    assert r.exit_code == 0, (r.stderr, r.exception)


@pytest.mark.parametrize(("doc", "says"), [
    ({"params": "abc"}, "params must be a mapping, got str"),
    ({"params": [1]}, "params must be a mapping, got list"),
])
@pytest.mark.parametrize("kind", sorted(DOCS))
def test_params_that_is_not_a_mapping_is_refused(kind: str, doc: dict[str, Any],
                                                 says: str) -> None:
    base, args = DOCS[kind]
    r, f = _invoke({**base, **doc}, args)
    assert r.exit_code == 2, (r.stderr, r.exception)
    assert says in r.stderr and str(f) in r.stderr, r.stderr


@settings(max_examples=60, deadline=None)
@given(doc=damaged(DOCS["mapa"][0]))
def test_a_damaged_single_node_workload_runs_or_is_refused_in_one_line(doc: Any) -> None:
    _simulate(doc, DOCS["mapa"][1])


@settings(max_examples=60, deadline=None)
@given(doc=damaged(DOCS["hierarchy"][0]))
def test_a_damaged_multi_node_workload_runs_or_is_refused_in_one_line(doc: Any) -> None:
    _simulate(doc, DOCS["hierarchy"][1])


@settings(max_examples=60, deadline=None)
@given(doc=damaged(DOCS["andreas"][0]))
def test_a_damaged_planning_workload_runs_or_is_refused_in_one_line(doc: Any) -> None:
    _simulate(doc, DOCS["andreas"][1])


@pytest.mark.parametrize(("jobs", "says"), [
    (3, "needs a 'jobs' list"),
    ("abc", "needs a 'jobs' list"),
])
def test_jobs_that_is_not_a_list_is_refused(jobs: Any, says: str) -> None:
    """Asking whether a file is a multi-node workload iterated its ``jobs`` (a TypeError
    traceback on a number)."""
    r, _ = _invoke({**DOCS["mapa"][0], "jobs": jobs}, DOCS["mapa"][1])
    assert r.exit_code == 2 and says in r.stderr, (r.stderr, r.exception)


@pytest.mark.parametrize("spec", ["x" * 300, "x" * 300 + ".yaml", "y/" + "x" * 300])
def test_a_workload_name_too_long_for_a_file_is_refused_in_one_line(spec: str) -> None:
    """Such a name made ``pathlib`` raise OSError (ENAMETOOLONG): a traceback."""
    with tempfile.TemporaryDirectory() as d:
        r = runner.invoke(app, ["simulate", "-w", spec, "-p", "gputopo", "-o", d,
                                "--no-plots"])
    assert r.exit_code == 2, (r.stderr, r.exception)
    assert r.stderr.startswith("gputopo: error: ") and \
        ("unknown workload" in r.stderr or "not found" in r.stderr), r.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["-w", "mapa:jobs=1000000000", "-t", "dgx1-v100", "-p", "gputopo"],
     "mapa: jobs=1000000000 is more than the simulator takes (at most 100000)"),
    (["-w", "mapa", "-n", "1000000000", "-t", "dgx1-v100", "-p", "gputopo"],
     "mapa: nodes=1000000000 is more than the simulator takes (at most 10000)"),
    (["-w", "tabrizian-mix:jobs=200000", "-p", "baseline"], "jobs=200000 is more than"),
    (["-w", "amaral-s2:jobs=100001", "-t", "minsky", "-p", "fcfs"], "jobs=100001 is more than"),
    (["-w", "hierarchy:nodes=100000000", "-p", "gputopo"],
     "hierarchy: blocks x racks x nodes=1600000000 is more than"),
    (["-w", "hierarchy:jobs=100001", "-p", "gputopo"], "hierarchy: jobs=100001 is more than"),
    (["-w", "andreas-s1:jobs=100000000", "-p", "fifo"], "andreas-s1: jobs=100000000 is more"),
    (["-w", "andreas-s1", "-n", "100000000", "-p", "fifo"], "andreas-s1: nodes=100000000 is"),
])
def test_a_workload_too_large_to_simulate_is_refused_before_it_is_built(
        args: list[str], says: str) -> None:
    """Each of these took all the machine's memory (a MemoryError, or the kernel's OOM killer
    first) building its jobs or nodes; the generated workload files found the first (a
    file's ``default_nodes`` or cluster ``nodes`` drawn as a 21-digit number)."""
    with tempfile.TemporaryDirectory() as d:
        r = runner.invoke(app, ["simulate", *args, "-o", d, "--no-plots"])
    assert r.exit_code == 2, (r.stderr, r.exception)
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize(("kind", "patch", "says"), [
    ("mapa", {"default_nodes": 10**18}, "nodes=1000000000000000000 is more than"),
    ("hierarchy", {"cluster": {"machine": "dgx1-v100", "blocks": 4, "racks": 4,
                               "nodes": 10**18}}, "blocks x racks x nodes="),
])
def test_a_workload_file_whose_cluster_is_too_large_is_refused(
        kind: str, patch: dict[str, Any], says: str) -> None:
    base, args = DOCS[kind]
    r, _ = _invoke({**base, **patch}, args)
    assert r.exit_code == 2 and says in r.stderr, (r.stderr, r.exception)
