"""``gputopo place`` with generated input: whatever the arguments and whatever a topology
file holds, it exits 0 (placed), 1 (cannot fit, with the reason) or 2 with one line on
stderr — never a traceback. (The hand-picked cases and their messages are in
``test_place_cli.py``.)"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gputopo_cli.main import app
from tests.damage import damaged, exits_cleanly
from topology import catalog, serialization

runner = CliRunner()

#: Argument values a user might type, and some no one would.
WORDS = st.sampled_from([
    "", "0", "1", "2", "3", "5", "8", "9", "-1", "0.3", "1.5", "1e3", "nan", "inf", "0,4",
    "0:0.5,1:0.7", "0:1.5", "0:-1", "7,7", "0-1,1-2", "ring", "tree", "pair", "all-to-all",
    "gputopo", "mapa-preserve", "baseline", "colocate", "json", "table", "x", ",", ":",
    "0-\u00b2", "\u00b2", "\u0661",
]) | st.text(max_size=10)
OPTIONS = ("-n", "--used", "--pattern", "--policy", "-o", "--memory-mib")


@settings(max_examples=150, deadline=None)
@given(opts=st.lists(st.tuples(st.sampled_from(OPTIONS), WORDS), max_size=4))
def test_any_arguments_exit_0_1_or_2_with_one_line(opts: list[tuple[str, str]]) -> None:
    args = ["place", "-t", "dgx1-v100"]
    for flag, value in opts:
        args += [flag, value]
    exits_cleanly(runner.invoke(app, args))


DGX = json.loads(serialization.dumps(catalog.get("dgx1-v100")))


@settings(max_examples=150, deadline=None)
@given(doc=damaged(DGX))
def test_a_damaged_topology_file_is_placed_on_or_refused_in_one_line(doc: Any) -> None:
    """The DGX-1 V100's own topology document with one part replaced or removed."""
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "topo.json"
        f.write_text(json.dumps(doc))
        exits_cleanly(runner.invoke(app, ["place", "-t", str(f), "-n", "2"]))
