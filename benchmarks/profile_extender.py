"""Profile the running gputopo extender under the scheduler benchmark's load.

One fresh local control plane of a :mod:`benchmarks.bench_scheduler` size (default
``100x1000``: 100 kwok DGX-1 V100 nodes, 1,000 mixed GPU pods), the real
``gputopo extender --state kubernetes`` and kube-scheduler; ``py-spy record`` attached to the
extender's PID while the size's GPU pods are scheduled once in stream and once in backlog mode
(see :func:`benchmarks.bench_scheduler.measure`). py-spy samples every thread of the process
(``--threads``, idle frames dropped), so the profile covers the event loop (HTTP, filter,
prioritize, bind's decision), the bind threads (the Binding call) and the two watch threads;
by default only the thread holding the GIL is sampled (``--gil``), so the shares are of the
Python CPU time, not of time spent waiting on sockets.

Prints and writes (``--out``, JSON) for the whole recording:

* ``cpu_ms_per_pod``: the extender process's user+system CPU time (``/proc/PID/stat``) over
  the runs divided by the pods scheduled, milliseconds;
* ``top_self``: the functions where samples were taken (leaf frames), share of all samples;
* ``top_inclusive``: the functions on the stack of a sample, share of all samples;
* ``by_thread``: samples per thread (event loop, bind workers, watches).

Needs ``py-spy`` (``pip install py-spy``; not a project dependency) and permission to trace the
child (root, or ``ptrace_scope`` 0).

Run: ``.venv/bin/python -m benchmarks.profile_extender [--size 100x1000] [--rate 100]
[--out benchmarks/results/profile-extender.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_scheduler import MACHINE, SIZES, Size, gpu_pods, measure, reset
from localcluster import ControlPlane
from localcluster.gpucluster import GpuCluster, scheduler_config

OUT = Path(__file__).parent / "results" / "profile-extender.json"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14, 15)


def _frame_name(frame: str) -> str:
    """``function (path/to/module.py:line)`` → ``function (module.py)`` (lines merged)."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    for anchor in ("site-packages", "lib"):
        if anchor in parts:
            parts = parts[parts.index(anchor) + 1:]
            break
    short = "/".join(parts[-3:]) if parts else path
    return f"{name} ({short})" if where else name


def summarise(collapsed: str, top: int = 25) -> dict[str, Any]:
    """Self and inclusive shares (percent of samples) from py-spy's ``--format raw`` output
    (one ``frame;frame;...;leaf count`` line per distinct stack, root first)."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = stack.split(";")
        thread = frames[0] if frames and frames[0].startswith(("thread", "process")) else ""
        frames = [_frame_name(f) for f in frames if not f.startswith(("thread", "process"))]
        if not frames:
            continue
        total += count
        threads[thread] += count
        self_c[frames[-1]] += count
        for f in set(frames):
            incl[f] += count

    def pct(c: Counter[str]) -> list[tuple[str, float]]:
        return [(f, round(100 * n / total, 1)) for f, n in c.most_common(top)] if total else []

    return {"samples": total, "top_self": pct(self_c), "top_inclusive": pct(incl),
            "by_thread": pct(threads)}


def run(size: Size, rate: int, raw_path: Path, native: bool, gil: bool) -> dict[str, Any]:
    """Start the stack, record the extender while the size's pods are scheduled twice."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with ControlPlane() as cp, GpuCluster(cp) as gc:
        gc.start([(f"gpu-{i:03d}", MACHINE) for i in range(size.nodes)], scheduler=False)
        config = scheduler_config(gc.extender.url)
        gc.start_scheduler(config)
        pid = gc.extender.pid
        assert pid is not None
        args = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                "--threads", "--output", str(raw_path), "--nonblocking"]
        if native:
            args.append("--native")
        if gil:
            args.append("--gil")
        recorder = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)
        cpu0 = cpu_seconds(pid)
        runs = []
        for mode in ("stream", "backlog"):
            result = measure(gc, gpu_pods(size), f"profile-{mode}", 600.0,
                             config if mode == "backlog" else None)
            runs.append({"mode": mode, **result})
            print(f"  {size.label} gputopo {mode}: {result['pods_per_s']:.1f} pods/s",
                  flush=True)
            if mode == "stream":
                reset(gc, check_extender=True)
        cpu = cpu_seconds(pid) - cpu0
        recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        _, err = recorder.communicate(timeout=60)
        if not raw_path.exists():
            raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace')[-2000:]}")
    pods = 2 * size.pods
    return {"size": size.label, "runs": runs, "cpu_seconds": round(cpu, 2),
            "cpu_ms_per_pod": round(1000 * cpu / pods, 2), "pods": pods}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_extender",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--size", default="100x1000", choices=sorted(SIZES))
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument("--all-threads", action="store_true",
                    help="sample every non-idle thread (default: only the thread holding the "
                    "GIL, i.e. where the process's Python CPU goes)")
    ap.add_argument("--top", type=int, default=25, help="functions listed per table")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    raw_path = args.out.with_suffix(".collapsed.txt")
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    raw_path.unlink(missing_ok=True)
    doc = run(SIZES[args.size], args.rate, raw_path, args.native, not args.all_threads)
    doc.update(summarise(raw_path.read_text(), args.top))
    doc["collapsed_stacks"] = raw_path.name
    doc["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"extender CPU: {doc['cpu_seconds']} s for {doc['pods']} pods = "
          f"{doc['cpu_ms_per_pod']} ms per pod; {doc['samples']} samples")
    for key in ("by_thread", "top_inclusive", "top_self"):
        print(f"{key}:")
        for name, share in doc[key]:
            print(f"  {share:5.1f} %  {name}")
    print(f"wrote {args.out} and {raw_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
