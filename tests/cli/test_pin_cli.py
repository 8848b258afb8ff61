"""``gputopo pin -- CMD``: for real, in a subprocess on this machine (the child's
``/proc/self/status`` shows its CPU affinity), plus the pure plan."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputopo_cli.cmd_pin import MAX_CPU, plan
from topology.model import TopologyError, format_cpu_list

GPUTOPO = Path(sys.executable).parent / "gputopo"
ALLOWED = sorted(os.sched_getaffinity(0))
#: Prints the child's PID and the kernel's view of its CPU affinity.
PROBE = [sys.executable, "-c",
         "import os; print(os.getpid()); "
         "print([l.split(':')[1].strip() for l in open('/proc/self/status') "
         "if l.startswith('Cpus_allowed_list')][0])"]

needs_two = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs to pin to one")


def pin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``gputopo pin ARGS`` with ``env`` added to a copy of this environment (and
    ``GPUTOPO_CPU_AFFINITY`` removed unless ``env`` sets it)."""
    full = {k: v for k, v in os.environ.items() if k != "GPUTOPO_CPU_AFFINITY"}
    full.update(env or {})
    cmd = [str(GPUTOPO)] if GPUTOPO.is_file() else [sys.executable, "-m", "gputopo_cli.main"]
    return subprocess.run([*cmd, "pin", *args], env=full, capture_output=True, text=True,
                          timeout=60)


def probe(*args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """(child's Cpus_allowed_list, stderr) of ``gputopo pin ARGS -- PROBE``; checks that the
    command replaced the wrapper (exec: same PID as the process started)."""
    full = {k: v for k, v in os.environ.items() if k != "GPUTOPO_CPU_AFFINITY"}
    full.update(env or {})
    cmd = [str(GPUTOPO)] if GPUTOPO.is_file() else [sys.executable, "-m", "gputopo_cli.main"]
    proc = subprocess.Popen([*cmd, "pin", *args, "--", *PROBE], env=full, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    pid, cpus = out.split()
    assert int(pid) == proc.pid  # exec'd, not a child process
    return cpus, err


@needs_two
def test_pins_the_command_to_the_affinity_from_the_environment() -> None:
    last = ALLOWED[-1]
    cpus, err = probe(env={"GPUTOPO_CPU_AFFINITY": str(last)})
    assert cpus == str(last)
    assert err.strip() == (f"gputopo pin: pinned to CPUs {last} (GPUTOPO_CPU_AFFINITY {last} "
                           f"∩ allowed {format_cpu_list(ALLOWED)})")


@needs_two
def test_only_the_allowed_cpus_of_the_affinity_are_used() -> None:
    """A DGX-1's NUMA node 1 is CPUs 20-39,60-79: on this machine only those it has count."""
    first = ALLOWED[0]
    cpus, _ = probe(env={"GPUTOPO_CPU_AFFINITY": f"{first},{MAX_CPU - 2}-{MAX_CPU - 1}"})
    assert cpus == str(first)


def test_no_affinity_runs_the_command_unchanged_and_says_so() -> None:
    for env in ({}, {"GPUTOPO_CPU_AFFINITY": ""}, {"GPUTOPO_CPU_AFFINITY": "N/A"}):
        cpus, err = probe(env=env)
        assert cpus == format_cpu_list(ALLOWED)
        assert err.startswith("gputopo pin: ") and "running the command unpinned" in err
        assert err.count("\n") == 1


def test_affinity_outside_the_allowed_cpus_runs_unpinned_and_says_so() -> None:
    cpus, err = probe(env={"GPUTOPO_CPU_AFFINITY": f"{MAX_CPU - 1}"})
    assert cpus == format_cpu_list(ALLOWED)
    assert f"none of the CPUs {MAX_CPU - 1}" in err and "unpinned" in err


@needs_two
def test_cpus_option_overrides_the_environment_and_quiet_is_quiet() -> None:
    first = ALLOWED[0]
    cpus, err = probe("--cpus", str(first), "--quiet",
                      env={"GPUTOPO_CPU_AFFINITY": str(ALLOWED[-1])})
    assert cpus == str(first) and err == ""


def test_the_command_s_exit_status_and_arguments_pass_through() -> None:
    r = pin("--", "sh", "-c", 'echo "$0 $1"; exit 3', "a b", "--cpus")
    assert r.returncode == 3 and r.stdout == "a b --cpus\n"
    # without "--", options after the command are the command's too
    r = pin("sh", "-c", "exit 4")
    assert r.returncode == 4


@pytest.mark.parametrize(("args", "env", "code", "needle"), [
    ((), {"GPUTOPO_CPU_AFFINITY": "0"}, 2, "no command to run"),
    (("--",), {}, 2, "no command to run"),
    (("--", "true"), {"GPUTOPO_CPU_AFFINITY": "0-x"}, 2, "not a CPU list"),
    (("--", "true"), {"GPUTOPO_CPU_AFFINITY": "3-1"}, 2, "not a CPU list"),
    (("--", "true"), {"GPUTOPO_CPU_AFFINITY": "0-4000000000"}, 2, "out of range"),
    (("--cpus", "1,,2", "--", "true"), {}, 2, "--cpus: not a CPU list"),
    (("--", "/nonexistent/gputopo-cmd"), {}, 127, "command not found"),
    (("--", "{plain}"), {}, 126, "not executable"),
    (("--", "{garbage}"), {}, 126, "cannot run"),
])
def test_bad_input_exits_with_one_line(
    args: tuple[str, ...], env: dict[str, str], code: int, needle: str, tmp_path: Path
) -> None:
    plain, garbage = tmp_path / "plain.txt", tmp_path / "garbage"
    plain.write_text("not a program\n")  # no execute bit
    garbage.write_bytes(b"\x00\x01\x02")
    garbage.chmod(0o755)  # executable, but no format the kernel knows
    args = tuple(a.format(plain=plain, garbage=garbage) for a in args)
    r = pin(*args, env=env)
    assert r.returncode == code, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("gputopo: error:")]
    assert len(errors) == 1 and needle in errors[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_malformed_list_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    r = pin("--", "touch", str(marker), env={"GPUTOPO_CPU_AFFINITY": "0-"})
    assert r.returncode == 2 and not marker.exists()


# ---------------------------------------------------------------------------- the plan
def test_plan_intersects_and_explains() -> None:
    p = plan("0-19,40-59", {0, 1, 2, 40, 100})
    assert p.cpus == {0, 1, 2, 40}
    assert p.note == "pinned to CPUs 0-2,40 (GPUTOPO_CPU_AFFINITY 0-19,40-59 ∩ allowed 0-2,40,100)"
    assert plan(None, {0}).cpus == frozenset()
    assert plan("   ", {0}).cpus == frozenset()
    assert plan("20-39", {0, 1}).cpus == frozenset()
    with pytest.raises(TopologyError):
        plan("1-0", {0})
    with pytest.raises(TopologyError, match="out of range"):
        plan(f"0-{MAX_CPU}", {0})
