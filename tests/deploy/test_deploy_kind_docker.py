"""Static checks of what cannot run here (no Docker daemon, so no kind): the kind config, the
Dockerfile and its build context, the quick-start script, and the example pods.

The build-context test goes one step further than parsing: it copies exactly the files
``.dockerignore`` lets through and builds the wheel from them, as the Dockerfile's first stage
does, then checks the wheel carries every package, its data files and the ``gputopo`` entry
point.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.chart import helm_template
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_PATTERN,
    MANAGED_RESOURCES,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.patterns import parse_pattern

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ kind


def test_kind_config() -> None:
    cfg = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    assert cfg["kind"] == "Cluster"
    assert cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert set(cfg) <= {"kind", "apiVersion", "name", "nodes", "networking",
                        "featureGates", "kubeadmConfigPatches"}
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles == ["control-plane", "worker", "worker"]
    chart_values = yaml.safe_load((REPO / "helm" / "gputopo" / "values.yaml").read_text())
    selector = chart_values["devicePlugin"]["nodeSelector"]
    for node in cfg["nodes"]:
        assert set(node) <= {"role", "labels", "extraMounts", "extraPortMappings", "image",
                             "kubeadmConfigPatches"}
        labels = node.get("labels", {})
        assert all(isinstance(v, str) for v in labels.values()), "label values must be strings"
        if node["role"] == "worker":
            # The device-plugin DaemonSet's default nodeSelector matches the workers...
            assert selector.items() <= labels.items()
        else:
            # ...and not the control plane.
            assert not selector.items() <= labels.items()
        for mount in node.get("extraMounts", []):
            assert mount["hostPath"].startswith("/") and mount["containerPath"].startswith("/")


def test_quickstart_script() -> None:
    script = REPO / "scripts" / "kind-quickstart.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "set -euo pipefail" in text
    assert "--config kind-config.yaml" in text
    assert "kind load docker-image" in text
    assert "devicePlugin.fakeTopology=" in text and "dgx1-v100" in text
    assert "examples/ring-4gpu.yaml" in text
    assert (REPO / "examples" / "ring-4gpu.yaml").is_file()
    assert "helm/gputopo" in text
    assert not re.search(r"\bpkill\b|\bkillall\b", text)
    assert "topologyFiles" in text and "GPU_MEMORY_MIB" in text


def test_quickstart_mounts_your_own_topo_m_text(helm_available: None, tmp_path: Path) -> None:
    """FAKE_TOPOLOGY=<a saved `nvidia-smi topo -m`>: the script's helm arguments, run through
    the real helm, mount the text unchanged and point every device plugin at it."""
    text = REPO / "tests" / "fixtures" / "nvidia-smi" / "dgx1-v100-driver535.txt"
    mine = tmp_path / "my-box.topo.txt"
    mine.write_text(text.read_text())
    script = (REPO / "scripts" / "kind-quickstart.sh").read_text()
    block = script[script.index("topology_args=("):script.index('log "installing the chart')]
    program = (
        'die() { echo "$*" >&2; exit 1; }\n'
        f"FAKE_TOPOLOGY={shlex.quote(str(mine))}\nGPU_MEMORY_MIB=16160\n{block}\n"
        'printf "%s\\0" "${topology_args[@]}"\n'
    )
    out = subprocess.run(["bash", "-c", program], capture_output=True, check=True).stdout
    args = out.decode().split("\0")[:-1]
    objs = [o for o in yaml.safe_load_all(helm_template(extra_args=args)) if o]
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and "topologies" in o["metadata"]["name"])
    assert cm["data"]["my-box.topo.txt"] == text.read_text()
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert "--fake-topology=/etc/gputopo/topologies/my-box.topo.txt" in c["args"]
    assert {"name": "GPUTOPO_DP_GPU_MEMORY_MIB", "value": "16160"} in c["env"]


# ------------------------------------------------------------------ Dockerfile


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile() -> None:
    ins = _instructions(REPO / "Dockerfile")
    froms = [a for i, a in ins if i == "FROM"]
    assert froms and all(a.split()[0] == "python:3.11-slim" for a in froms)
    final = len(ins) - 1 - [i for i, _ in ins][::-1].index("FROM")
    final_stage = ins[final:]
    runs = " && ".join(a for i, a in ins if i == "RUN")
    assert re.search(r"pip (wheel|install)\b.*\s\.(\s|$)", runs), "the project is built with pip"
    final_runs = " && ".join(a for i, a in final_stage if i == "RUN")
    assert "pip install" in final_runs
    entry = [a for i, a in final_stage if i == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["gputopo"]
    user = [a for i, a in final_stage if i == "USER"]
    assert user, "the image must not run as root by default"
    uid = user[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it
    deploy = [d for d in yaml.safe_load_all((REPO / "deploy" / "gputopo.yaml").read_text()) if d]
    scheduler = [d for d in deploy if d["kind"] == "Deployment"
                 and d["metadata"]["name"] == "gputopo-scheduler"][0]
    [extender] = [c for c in scheduler["spec"]["template"]["spec"]["initContainers"]
                  if c["name"] == "extender"]  # a sidecar of the scheduler pods by default
    assert extender["securityContext"]["runAsUser"] == int(uid)
    for i, a in ins:
        if i in ("COPY", "ADD") and "--from=" not in a:
            for src in shlex.split(a)[:-1]:
                assert (REPO / src).exists(), f"{i} {src}: not in the repository"


def _dockerignore_patterns() -> list[re.Pattern[str]]:
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!"), "exceptions are not modelled by this test"
        rx = ""
        i = 0
        p = line.strip("/")
        while i < len(p):
            if p.startswith("**/", i):
                rx += "(?:.*/)?"
                i += 3
            elif p.startswith("**", i):
                rx += ".*"
                i += 2
            elif p[i] == "*":
                rx += "[^/]*"
                i += 1
            elif p[i] == "?":
                rx += "[^/]"
                i += 1
            else:
                rx += re.escape(p[i])
                i += 1
        patterns.append(re.compile(rx + r"\Z"))
    return patterns


def _ignored(rel: str, patterns: list[re.Pattern[str]]) -> bool:
    """Docker excludes a path when a pattern matches it or one of its parent directories."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    return any(rx.match(p) for rx in patterns for p in prefixes)


def _build_context(dest: Path) -> list[str]:
    patterns = _dockerignore_patterns()
    included = []
    for root, dirs, files in os.walk(REPO):
        rel_root = Path(root).relative_to(REPO).as_posix()
        rel_root = "" if rel_root == "." else rel_root + "/"
        dirs[:] = [d for d in dirs if not _ignored(rel_root + d, patterns)]
        for f in files:
            rel = rel_root + f
            if not _ignored(rel, patterns):
                included.append(rel)
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, dest / rel)
    return included


def test_dockerignore_keeps_the_context_small_but_complete(tmp_path: Path) -> None:
    patterns = _dockerignore_patterns()
    for keep in ("pyproject.toml", "README.md", "topology/model.py",
                 "gputopo_cli/main.py", "device_plugin/api/__init__.py"):
        assert not _ignored(keep, patterns), keep
    for drop in (".venv/bin/python", ".git/HEAD", "tests/conftest.py",
                 "topology/__pycache__/model.cpython-311.pyc", "gputopo.egg-info/PKG-INFO",
                 "helm/gputopo/Chart.yaml"):
        assert _ignored(drop, patterns), drop


@pytest.mark.slow
def test_wheel_built_from_the_docker_context(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    files = _build_context(ctx)
    assert "pyproject.toml" in files and "README.md" in files
    assert not any(f.startswith(("tests/", ".venv/", ".git/")) for f in files)
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(ctx)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [wheel] = list(out.glob("gputopo-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = zf.read(entry_points).decode()
    assert re.search(r"^gputopo\s*=\s*gputopo_cli\.main:main$", text, re.M), text
    for package in ("topology", "scheduler_extender", "device_plugin", "gputopo_cli"):
        assert f"{package}/__init__.py" in names, package
    # Package data the commands read at run time.
    assert any(n.startswith("topology/") and n.endswith(".json") for n in names)
    assert any(n.startswith("device_plugin/api/") and n.endswith(".proto") for n in names)


# ------------------------------------------------------------------ examples


def _examples() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def test_examples_request_gpus_through_gputopo() -> None:
    examples = dict(_examples())
    assert {"ring-4gpu.yaml", "insensitive-2gpu.yaml", "fractional-half-gpu.yaml",
            "notebook-1gpu.yaml"} <= set(examples)
    for name, pod in examples.items():
        assert pod["kind"] == "Pod", name
        assert pod["spec"]["schedulerName"] == "gputopo-scheduler", name
        requested: dict[str, int] = {}
        for c in pod["spec"]["containers"]:
            for k, v in (c.get("resources", {}).get("limits") or {}).items():
                if k in MANAGED_RESOURCES:
                    assert isinstance(v, int) and v > 0, (name, k, v)
                    requested[k] = requested.get(k, 0) + v
        assert requested, f"{name} requests no gputopo resource"
        ann = pod["metadata"].get("annotations") or {}
        if ANN_PATTERN in ann:
            parse_pattern(ann[ANN_PATTERN], requested["nvidia.com/gpu"])
        if ANN_BW_SENSITIVE in ann:
            assert ann[ANN_BW_SENSITIVE] in ("true", "false")
    ring = examples["ring-4gpu.yaml"]
    assert ring["metadata"]["annotations"] == {ANN_PATTERN: "ring", ANN_BW_SENSITIVE: "true"}
    assert ring["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert examples["insensitive-2gpu.yaml"]["metadata"]["annotations"][ANN_BW_SENSITIVE] == "false"
    frac = examples["fractional-half-gpu.yaml"]["spec"]["containers"][0]["resources"]["limits"]
    assert frac[RESOURCE_VGPU_CORE] == 50
    assert frac[RESOURCE_VGPU_MEMORY] * 256 == 8192  # 8 GiB in the default 256 MiB units
    assert "nvidia.com/gpu" not in frac
    nb = examples["notebook-1gpu.yaml"]["spec"]["containers"][0]["resources"]["limits"]
    assert nb["nvidia.com/gpu"] == 1
