"""The interpreter settings the extender serves with (:func:`scheduler_extender.app.
tune_interpreter`), checked in a fresh interpreter so this test process keeps its own."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import gc, json, sys
from scheduler_extender.app import tune_interpreter
from scheduler_extender.settings import load_settings
before = sys.getswitchinterval()
tune_interpreter(load_settings({{"gil_switch_interval_ms": {ms}}}).gil_switch_interval_ms / 1000)
given = sys.getswitchinterval()
tune_interpreter(load_settings({{}}).gil_switch_interval_ms / 1000)
print(json.dumps({{"before": before, "given": given, "default": sys.getswitchinterval(),
                  "threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}}))
"""


def probe(ms: float) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(ms=ms)], check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_the_extender_switches_threads_ten_times_as_often_and_collects_less() -> None:
    got = probe(2)
    assert got["before"] == 0.005  # CPython's default: how long a bind thread may keep the GIL
    assert got["given"] == 0.002  # the setting, milliseconds → seconds
    assert got["default"] == 0.0005
    assert got["threshold"] == [50_000, 50, 100]
    assert got["frozen"] > 0  # type: ignore[operator]  # start-up objects left the collector

