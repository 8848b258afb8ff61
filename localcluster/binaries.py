"""Locate (and if needed build) the control-plane binaries.

Lookup order:

1. ``GPUTOPO_SKIP_E2E=1`` in the environment: :class:`BinariesUnavailable` at once, nothing built.
2. ``GPUTOPO_K8S_BINDIR``: a directory holding ``etcd``, ``kube-apiserver``, ``kube-scheduler``,
   ``kwok`` and optionally ``helm`` and ``kube-controller-manager``. Nothing is built for it.
3. The version-keyed toolset directory of ``scripts/build-k8s-tools.sh --print-bindir`` (under
   ``${GPUTOPO_CACHE:-~/.cache/gputopo}/bin``); when a binary is missing there the script is run
   (cold: tens of minutes on 2 cores; warm: seconds).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REQUIRED_TOOLS: tuple[str, ...] = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")
OPTIONAL_TOOLS: tuple[str, ...] = ("helm", "kube-controller-manager")

ENV_BINDIR = "GPUTOPO_K8S_BINDIR"
ENV_SKIP = "GPUTOPO_SKIP_E2E"
ENV_CACHE = "GPUTOPO_CACHE"


class BinariesUnavailable(RuntimeError):
    """The control-plane binaries are not there and could not be built (or building is off)."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the control-plane executables."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kwok: Path
    helm: Path | None = None
    kube_controller_manager: Path | None = None

    @classmethod
    def from_dir(cls, bindir: Path) -> Binaries:
        """Take every tool from ``bindir`` (symlinks are resolved).

        Raises:
            BinariesUnavailable: a required tool is missing or not executable.
        """
        found: dict[str, Path | None] = {}
        for name in REQUIRED_TOOLS + OPTIONAL_TOOLS:
            path = bindir / name
            if path.is_file() and os.access(path, os.X_OK):
                found[name] = path.resolve()
            elif name in REQUIRED_TOOLS:
                raise BinariesUnavailable(f"{name} not found (or not executable) in {bindir}")
            else:
                found[name] = None
        etcd, apiserver, scheduler, kwok = (found[n] for n in REQUIRED_TOOLS)
        assert etcd and apiserver and scheduler and kwok  # checked above
        return cls(
            etcd=etcd,
            kube_apiserver=apiserver,
            kube_scheduler=scheduler,
            kwok=kwok,
            helm=found["helm"],
            kube_controller_manager=found["kube-controller-manager"],
        )


def repo_root() -> Path:
    """The repository root (the directory above this package)."""
    return Path(__file__).resolve().parent.parent


def build_script_path() -> Path:
    """Path of ``scripts/build-k8s-tools.sh``."""
    return repo_root() / "scripts" / "build-k8s-tools.sh"


def cache_root() -> Path:
    """``$GPUTOPO_CACHE`` or ``~/.cache/gputopo``."""
    env = os.environ.get(ENV_CACHE)
    return Path(env) if env else Path.home() / ".cache" / "gputopo"


def default_bindir() -> Path:
    """The toolset directory the build script uses for the pinned versions.

    Cheap: runs the script with ``--print-bindir``, which builds nothing.

    Raises:
        BinariesUnavailable: the script is missing or bash cannot run it.
    """
    script = build_script_path()
    if not script.is_file():
        raise BinariesUnavailable(f"build script not found: {script}")
    try:
        out = subprocess.run(
            ["bash", str(script), "--print-bindir"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise BinariesUnavailable(f"{script} --print-bindir failed: {exc}") from exc
    return Path(out.strip())


def build(log_path: Path | None = None, timeout_s: float = 3 * 3600) -> Path:
    """Run the build script (idempotent) and return the toolset directory.

    Concurrent callers are serialised with a lock file in the cache directory.

    Args:
        log_path: where the script's output goes; default ``<cache>/build-k8s-tools.log``.
        timeout_s: give up after this many seconds.

    Raises:
        BinariesUnavailable: Go is missing, the build failed or timed out.
    """
    if shutil.which("go") is None:
        raise BinariesUnavailable("Go toolchain not found in PATH; cannot build the binaries")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    log_path = log_path or root / "build-k8s-tools.log"
    with open(root / ".build.lock", "w") as lock, open(log_path, "w") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            proc = subprocess.run(
                ["bash", str(build_script_path())],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                timeout=timeout_s,
                env=_lock_held_env(),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise BinariesUnavailable(f"build script failed: {exc} (log: {log_path})") from exc
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if proc.returncode != 0:
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-20:])
        raise BinariesUnavailable(
            f"build script exited {proc.returncode} (log: {log_path}):\n{tail}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def find_binaries(allow_build: bool = True) -> Binaries:
    """Find the control-plane binaries, building them when missing and ``allow_build``.

    Raises:
        BinariesUnavailable: ``GPUTOPO_SKIP_E2E`` is set, ``GPUTOPO_K8S_BINDIR`` lacks a tool, or
            the binaries are missing and cannot be built.
    """
    if os.environ.get(ENV_SKIP, "").strip().lower() not in ("", "0", "false", "no"):
        raise BinariesUnavailable(f"{ENV_SKIP} is set: not building the control-plane binaries")
    env_dir = os.environ.get(ENV_BINDIR)
    if env_dir:
        return Binaries.from_dir(Path(env_dir))
    bindir = default_bindir()
    try:
        return Binaries.from_dir(bindir)
    except BinariesUnavailable:
        if not allow_build:
            raise
    return Binaries.from_dir(build())


def find_kubelet_numa(allow_build: bool = True, timeout_s: float = 1800) -> Path:
    """The ``kubelet-numa`` harness (``scripts/kubelet-numa``: the 1.36 kubelet's Topology
    Manager, device manager and CPU manager code on hand-made cases), built by
    ``scripts/build-k8s-tools.sh --kubelet-numa`` when missing and ``allow_build`` (about
    20-30 s on 2 cores once the Go build cache holds the kube-apiserver build; the script
    prints the path whether it built it or found it).

    Raises:
        BinariesUnavailable: Go is missing, building is off and it is not built, or the build
            failed.
    """
    if shutil.which("go") is None:
        raise BinariesUnavailable("Go toolchain not found in PATH; cannot build kubelet-numa")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / "build-kubelet-numa.log"
    with open(root / ".build.lock", "w") as lock, open(log_path, "w") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            probe = _kubelet_numa_cached()
            if probe is not None:
                return probe
            if not allow_build:
                raise BinariesUnavailable("kubelet-numa is not built and building is off")
            proc = subprocess.run(
                ["bash", str(build_script_path()), "--kubelet-numa"],
                stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout_s,
                env=_lock_held_env(),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise BinariesUnavailable(f"building kubelet-numa failed: {exc} (log: {log_path})") \
                from exc
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if proc.returncode != 0:
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-20:])
        raise BinariesUnavailable(
            f"build-k8s-tools.sh --kubelet-numa exited {proc.returncode} (log: {log_path}):\n"
            f"{tail}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _kubelet_numa_cached() -> Path | None:
    """The harness binary for the current sources when already built (the script's key)."""
    import hashlib

    src = repo_root() / "scripts" / "kubelet-numa"
    digest = hashlib.sha256(
        (src / "main.go").read_bytes() + (src / "devicemanager" / "zz_gputopo_export.go")
        .read_bytes()).hexdigest()[:12]
    versions = (repo_root() / "scripts" / "k8s-versions.env").read_text()
    k8s = next((ln.split("=", 1)[1].strip() for ln in versions.splitlines()
                if ln.startswith("K8S_VERSION=")), "")
    path = cache_root() / "bin" / f"kubelet-numa-{k8s}-{digest}" / "kubelet-numa"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _lock_held_env() -> dict[str, str]:
    """The build script's environment when this process already holds ``.build.lock``: the
    script then does not take it again (it would wait for itself)."""
    return {**os.environ, "GPUTOPO_BUILD_LOCK_HELD": "1"}
