"""Where a pod's co-location profile comes from, as pure functions of its annotations.

Precedence (highest first), per number:

1. **explicit annotations** — ``gputopo.io/kernel-occupancy`` (C, Eq. 4.3 units: percent·µs
   over two iterations) and ``gputopo.io/mem-bandwidth-util`` (M, Eq. 4.2 units), with
   ``gputopo.io/iteration-time-ms`` for the solo iteration time t_j when the pod names no
   profile key that provides it;
2. **``gputopo.io/profile: <model>:<batch>``** — a key into the user's catalog (a file or
   ConfigMap, :func:`topology.colocation.profile.load_catalog_text`), then the shipped catalog;
3. **measured** — profiles recorded for the key from dcgm-exporter while a job of that key ran
   alone (:mod:`topology.colocation.dcgm`);
4. the **conservative default** (:func:`default_profile`).

GPU memory: ``gputopo.io/vgpu-memory`` (the pod's request, MiB after unit conversion) when
given, else the profile's, else :data:`DEFAULT_MEMORY_MIB`. A number from a lower layer fills
what a higher layer leaves out (e.g. explicit C and M with the catalog's t_j and memory).

**The default profile** (a pod with none of the above) is read as a heavy, unknown job: it
fills the GPU (its compute and bandwidth demands are 1) and carries 7/8 of the ΣC budget, so a
set holding it stays under the threshold only with jobs whose C ≤ threshold/8 (5·10⁶ at the
default 4·10⁷: in the shipped catalog every job but ResNet-18 and SE-ResNet-18 at batch 256 and
ResNet-50 at any batch). It is therefore never co-located with a heavy job, and co-located at
all only where the predicted δ stays ≥ 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from topology.colocation.model import DEFAULT_THRESHOLD
from topology.colocation.profile import (
    RATIO_SECOND_TO_UNITS,
    JobProfile,
    ProfileError,
    parse_profile_key,
)
from topology.contract import (  # the annotation names are the programs' contract
    ANN_ITERATION_MS,
    ANN_KERNEL_OCCUPANCY,
    ANN_MEM_BANDWIDTH_UTIL,
    ANN_PROFILE,
)

__all__ = [
    "ANN_ITERATION_MS", "ANN_KERNEL_OCCUPANCY", "ANN_MEM_BANDWIDTH_UTIL", "ANN_PROFILE",
    "DEFAULT_MEMORY_MIB", "default_profile", "profile_key", "ratios_from_profile",
    "resolve_profile",
]

#: Iteration time of the default profile, seconds (a mid-batch CIFAR iteration).
DEFAULT_ITERATION_S = 0.05
#: Share of the ΣC threshold the default profile carries.
DEFAULT_BUDGET_SHARE = 7.0 / 8.0
#: GPU memory reserved for a shared pod that names none (MiB; MPS caps the client to it).
DEFAULT_MEMORY_MIB = 4096


def default_profile(threshold: float = DEFAULT_THRESHOLD,
                    memory_mib: int = DEFAULT_MEMORY_MIB) -> JobProfile:
    """The conservative default (module docstring) for a ΣC threshold.

    Returns:
        C = M = 7/8 · ``threshold``; t_j = :data:`DEFAULT_ITERATION_S`; memory ``memory_mib``.
        Its occupancy and bandwidth ratios exceed 1 and are read as 1 (it fills the GPU).
    """
    c = DEFAULT_BUDGET_SHARE * threshold
    return JobProfile(DEFAULT_ITERATION_S, c, c, memory_mib, key=None, source="default")


def _number(annotations: Mapping[str, str], name: str) -> float | None:
    raw = annotations.get(name)
    if raw is None or not str(raw).strip():
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ProfileError(f"annotation {name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ProfileError(f"annotation {name}={raw!r} must be a finite number >= 0")
    return value


def profile_key(annotations: Mapping[str, str]) -> str | None:
    """The pod's canonical ``gputopo.io/profile`` key, or None.

    Raises:
        ProfileError: the annotation is not ``<model>:<batch>``.
    """
    raw = annotations.get(ANN_PROFILE)
    if raw is None or not str(raw).strip():
        return None
    return parse_profile_key(str(raw))


def resolve_profile(
    annotations: Mapping[str, str],
    *,
    catalog: Mapping[str, JobProfile],
    user: Mapping[str, JobProfile] | None = None,
    measured: Mapping[str, JobProfile] | None = None,
    memory_request_mib: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> JobProfile:
    """The profile a shared pod is placed with (precedence in the module docstring).

    Args:
        annotations: the pod's annotations.
        catalog: the shipped catalog (:func:`topology.colocation.profile.builtin_catalog`).
        user: the user's catalog (file / ConfigMap), consulted before ``catalog``.
        measured: profiles recorded from dcgm-exporter, consulted after both catalogs.
        memory_request_mib: the pod's ``gputopo.io/vgpu-memory`` request in MiB, if any.
        threshold: the ΣC threshold (sizes the default profile).

    Returns:
        A :class:`JobProfile` whose ``source`` says which layer provided C
        (``annotation``, ``user``, ``catalog``, ``measured`` or ``default``).

    Raises:
        ProfileError: a malformed annotation or profile key; explicit C or M (or t_j)
            without the other numbers and no known profile key to supply them (the message
            names the annotation).
    """
    key = profile_key(annotations)
    c = _number(annotations, ANN_KERNEL_OCCUPANCY)
    m = _number(annotations, ANN_MEM_BANDWIDTH_UTIL)
    t_ms = _number(annotations, ANN_ITERATION_MS)
    if t_ms is not None and t_ms <= 0:
        raise ProfileError(f"annotation {ANN_ITERATION_MS} must be > 0")

    base: JobProfile | None = None
    if key is not None:
        for layer in (user, catalog, measured):
            if layer is not None and key in layer:
                base = layer[key]
                break

    if c is None and m is None and t_ms is None:
        if base is None:
            prof = default_profile(threshold)
            if key is not None:
                prof = JobProfile(prof.iteration_s, prof.kernel_occupancy,
                                  prof.mem_bandwidth_util, prof.gpu_memory_mib, key=key,
                                  source="default")
        else:
            prof = base
    elif base is None:
        if c is None or m is None:
            missing = ANN_MEM_BANDWIDTH_UTIL if m is None else ANN_KERNEL_OCCUPANCY
            if c is None and m is None:
                missing = f"{ANN_KERNEL_OCCUPANCY} and {ANN_MEM_BANDWIDTH_UTIL}"
            raise ProfileError(
                f"{missing} missing: give both, or a {ANN_PROFILE} key the catalog knows"
            )
        if t_ms is None:
            raise ProfileError(
                f"{ANN_ITERATION_MS} missing: explicit C/M need the job's solo iteration time "
                f"(or a {ANN_PROFILE} key the catalog knows)"
            )
        prof = JobProfile(t_ms / 1000.0, c, m, DEFAULT_MEMORY_MIB, key=key, source="annotation")
    else:
        prof = JobProfile(
            iteration_s=t_ms / 1000.0 if t_ms is not None else base.iteration_s,
            kernel_occupancy=c if c is not None else base.kernel_occupancy,
            mem_bandwidth_util=m if m is not None else base.mem_bandwidth_util,
            gpu_memory_mib=base.gpu_memory_mib,
            key=key,
            source="annotation",
        )
    if memory_request_mib is not None and memory_request_mib > 0:
        prof = JobProfile(prof.iteration_s, prof.kernel_occupancy, prof.mem_bandwidth_util,
                          int(memory_request_mib), key=prof.key, source=prof.source)
    return prof


def ratios_from_profile(profile: JobProfile) -> tuple[float, float]:
    """The time-averaged (SM occupancy, DRAM active) ratios a profile implies (inverse of
    :func:`topology.colocation.profile.from_ratios`; not capped)."""
    scale = RATIO_SECOND_TO_UNITS * profile.iteration_s
    return profile.kernel_occupancy / scale, profile.mem_bandwidth_util / scale
