"""Turn dcgm-exporter scrapes of jobs running alone into measured profiles (pure).

The device plugin of a node where dcgm-exporter runs scrapes it every few seconds
(:mod:`device_plugin.profiling`) and hands each scrape here with the *subjects* of the moment:
for every GPU, the one pod running alone on it whose profile can be measured — a pod holding
exactly that GPU (one whole GPU, or a co-location slot with no co-resident), with a
``gputopo.io/profile`` key and a known solo iteration time. A subject that stays alone on its
GPU for ``window`` consecutive scrapes yields one measurement (:func:`topology.colocation.dcgm.
measured_profile`: C and M from the mean SM occupancy and DRAM activity, Tabrizian Eq. 4.2/4.3
units); successive measurements of one key are averaged. When dcgm-exporter attributes the
GPU to pods (its Kubernetes pod mapping), a scrape naming another pod breaks the run.

:meth:`Recorder.catalog` is what the plugin writes out (a ``ColocationProfiles`` document, the
extender's *measured* layer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from topology.colocation.dcgm import GPUReading, measured_profile
from topology.colocation.profile import JobProfile, ProfileCatalog, ProfileError


@dataclass(frozen=True)
class Subject:
    """A job that can be measured on one GPU.

    Attributes:
        pod: ``namespace/name``.
        key: its profile key (``<model>:<batch>``).
        iteration_s: its solo iteration time, seconds (dcgm-exporter cannot see it).
        memory_mib: its GPU memory if known better than dcgm-exporter's framebuffer reading.
    """

    pod: str
    key: str
    iteration_s: float
    memory_mib: int | None = None


@dataclass
class _Run:
    subject: Subject
    scrapes: list[Mapping[int, GPUReading]] = field(default_factory=list)


@dataclass
class _Mean:
    profile: JobProfile
    count: int


class Recorder:
    """Accumulates scrapes into measured profiles.

    Args:
        window: consecutive scrapes of a subject alone that make one measurement (≥ 1).
        name: the catalog name :meth:`catalog` gives.

    Raises:
        ValueError: ``window`` < 1.
    """

    def __init__(self, window: int = 6, name: str = "measured") -> None:
        if window < 1:
            raise ValueError("a measurement window needs at least one scrape")
        self.window = window
        self.name = name
        self._runs: dict[int, _Run] = {}
        self._means: dict[str, _Mean] = {}

    def observe(self, readings: Mapping[int, GPUReading],
                subjects: Mapping[int, Subject]) -> list[JobProfile]:
        """Feed one scrape (:func:`topology.colocation.dcgm.parse_exposition`) and the subjects
        at that moment (GPU index → subject alone on it).

        Returns:
            The measurements completed by this scrape (one per GPU whose window filled).
        """
        done: list[JobProfile] = []
        for gpu in set(self._runs) - set(subjects):
            del self._runs[gpu]
        for gpu, subject in subjects.items():
            reading = readings.get(gpu)
            usable = (reading is not None and reading.sm_occupancy is not None
                      and reading.dram_active is not None
                      and (not reading.pods or all(p.startswith(subject.pod + "/")
                                                   for p in reading.pods)))
            run = self._runs.get(gpu)
            if not usable or run is None or run.subject != subject:
                if not usable:
                    self._runs.pop(gpu, None)
                    continue
                run = self._runs[gpu] = _Run(subject)
            run.scrapes.append({gpu: reading} if reading is not None else {})
            if len(run.scrapes) >= self.window:
                try:
                    prof = measured_profile(run.scrapes, gpu, iteration_s=subject.iteration_s,
                                            key=subject.key, memory_mib=subject.memory_mib)
                except ProfileError:
                    prof = None
                run.scrapes.clear()
                if prof is not None:
                    done.append(self._merge(prof))
        return done

    def _merge(self, prof: JobProfile) -> JobProfile:
        key = prof.key or ""
        old = self._means.get(key)
        if old is None:
            self._means[key] = _Mean(prof, 1)
            return prof
        n = old.count
        mean = JobProfile(
            iteration_s=prof.iteration_s,
            kernel_occupancy=(old.profile.kernel_occupancy * n + prof.kernel_occupancy) / (n + 1),
            mem_bandwidth_util=(old.profile.mem_bandwidth_util * n + prof.mem_bandwidth_util)
            / (n + 1),
            gpu_memory_mib=max(old.profile.gpu_memory_mib, prof.gpu_memory_mib),
            key=prof.key,
            source="measured",
        )
        self._means[key] = _Mean(mean, n + 1)
        return mean

    def load(self, catalog: Mapping[str, JobProfile]) -> None:
        """Start from measurements made before (a restarted plugin reads its own document
        back); each counts as one measurement."""
        for key, prof in catalog.items():
            self._means.setdefault(key, _Mean(prof, 1))

    def catalog(self) -> ProfileCatalog:
        """Every key's averaged measurement, as a catalog."""
        return ProfileCatalog(self.name, {k: m.profile for k, m in sorted(self._means.items())},
                              "measured with dcgm-exporter while each job ran alone")

    def measurements(self, key: str) -> int:
        """How many windows were averaged into ``key``'s profile (0 = none yet)."""
        m = self._means.get(key)
        return m.count if m is not None else 0
