"""Measured co-location profiles where dcgm-exporter runs: scrape, attribute, record.

With ``--dcgm-exporter-url`` (e.g. ``http://localhost:9400/metrics``, dcgm-exporter's default
listener) the plugin scrapes the exporter every ``--profile-interval`` seconds, works out
which pod runs *alone* on each GPU from gputopo's own assignments (:func:`subjects`), and
feeds both to a :class:`topology.colocation.recorder.Recorder`. Completed measurements are
written as a ``ColocationProfiles`` document (Tabrizian Eq. 4.2/4.3 units) to a
:class:`ProfileSink`:

* ``configmap:NAMESPACE/NAME`` — the data key ``<node>.yaml`` of that ConfigMap (each node
  its own key, so nodes never overwrite each other); the chart mounts the ConfigMap into the
  extender, whose *measured* layer reads every key (``--measured-profiles DIR``);
* ``file:PATH`` — a file (tests, or a host directory shared some other way).

A job is measured when it holds exactly one GPU with nothing else on it (one whole GPU, or a
co-location slot without co-residents), carries ``gputopo.io/profile: <model>:<batch>``, and
its solo iteration time is known: ``gputopo.io/iteration-time-ms``, else the shipped catalog's
for that key.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from device_plugin.pods import PodInfo, PodSource, PodSourceError
from topology.colocation.dcgm import parse_exposition
from topology.colocation.profile import (
    ProfileCatalog,
    ProfileError,
    builtin_catalog,
    load_catalog_text,
    parse_profile_key,
)
from topology.colocation.recorder import Recorder, Subject
from topology.contract import (
    ANN_ITERATION_MS,
    ANN_PROFILE,
    AssignmentError,
    parse_assignment,
)

log = logging.getLogger(__name__)


class ProfilingError(Exception):
    """A scrape or a write failed (one line); the loop logs it and carries on."""


def scrape(url: str, timeout_s: float = 5.0) -> str:
    """GET dcgm-exporter's exposition text.

    Raises:
        ProfilingError: the request failed or did not answer 200.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - configured URL
            if resp.status != 200:
                raise ProfilingError(f"scraping {url}: HTTP {resp.status}")
            body: bytes = resp.read()
            return body.decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ProfilingError(f"scraping {url}: {exc}") from None


def subjects(pods: Sequence[PodInfo], node: str,
             catalog: Mapping[str, Any] | None = None) -> dict[int, Subject]:
    """GPU index → the pod that can be measured alone on it now (module docstring).

    Args:
        pods: the pods listed for ``node``.
        node: this node.
        catalog: where a key's iteration time comes from when the pod gives none (default:
            the shipped catalog).
    """
    cat = catalog if catalog is not None else builtin_catalog()
    holders: dict[int, list[tuple[PodInfo, int]]] = {}
    for pod in pods:
        if pod.node_name != node or pod.terminal or pod.deleting or pod.phase != "Running":
            continue
        try:
            a = parse_assignment(pod.annotations)
        except AssignmentError:
            continue
        if a.node != node:
            continue
        for g in a.gpu_indices:
            holders.setdefault(g, []).append((pod, len(a.gpu_indices)))
    out: dict[int, Subject] = {}
    for g, held in holders.items():
        if len(held) != 1 or held[0][1] != 1:
            continue  # shared with another pod, or one GPU of a multi-GPU job
        pod = held[0][0]
        raw_key = pod.annotations.get(ANN_PROFILE)
        if not raw_key:
            continue
        try:
            key = parse_profile_key(raw_key)
        except ProfileError:
            continue
        t_s: float | None = None
        raw_t = pod.annotations.get(ANN_ITERATION_MS)
        if raw_t:
            try:
                t_s = float(raw_t) / 1000.0
            except ValueError:
                t_s = None
        if (t_s is None or not t_s > 0) and key in cat:
            t_s = float(cat[key].iteration_s)
        if t_s is None or not t_s > 0:
            continue
        out[g] = Subject(pod.key, key, t_s)
    return out


def render(catalog: ProfileCatalog, node: str) -> str:
    """The YAML document written for ``node`` (``kind: ColocationProfiles``)."""
    doc = catalog.to_document()
    doc["metadata"]["name"] = f"measured-{node}"
    doc["metadata"]["description"] = (
        f"measured with dcgm-exporter on node {node} while each job ran alone")
    for entry in doc["profiles"].values():
        entry["source"] = f"measured on {node}"
    return yaml.safe_dump(doc, sort_keys=True)


class ProfileSink(Protocol):
    """Where measured profiles go."""

    def read(self, node: str) -> str | None:
        """What was written for ``node`` before (a restarted plugin continues), or None."""
        ...

    def write(self, node: str, text: str) -> None:
        """Replace ``node``'s document.

        Raises:
            ProfilingError: the write failed.
        """
        ...


class FileProfileSink:
    """A file (written atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, node: str) -> str | None:
        try:
            return self.path.read_text()
        except OSError:
            return None

    def write(self, node: str, text: str) -> None:
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except OSError as exc:
            raise ProfilingError(f"writing {self.path}: {exc.strerror or exc}") from None


class ConfigMapProfileSink:
    """The data key ``<node>.yaml`` of a ConfigMap, through the official client (created when
    missing, merge-patched otherwise)."""

    def __init__(self, api: Any, namespace: str, name: str, timeout_s: float = 10.0) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.timeout_s = timeout_s

    def read(self, node: str) -> str | None:
        try:
            cm = self.api.read_namespaced_config_map(self.name, self.namespace,
                                                     _request_timeout=self.timeout_s)
        except Exception:  # noqa: BLE001 - absent or unreadable: start afresh
            return None
        data = getattr(cm, "data", None) or {}
        value = data.get(f"{node}.yaml")
        return value if isinstance(value, str) else None

    def write(self, node: str, text: str) -> None:
        from kubernetes.client.exceptions import ApiException

        body = {"data": {f"{node}.yaml": text}}
        try:
            self.api.patch_namespaced_config_map(self.name, self.namespace, body,
                                                 _request_timeout=self.timeout_s)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise ProfilingError(f"patching configmap {self.namespace}/{self.name}: "
                                     f"HTTP {exc.status} {exc.reason}") from None
        except Exception as exc:  # noqa: BLE001 - urllib3 errors are not OSError
            raise ProfilingError(f"patching configmap {self.namespace}/{self.name}: "
                                 f"{type(exc).__name__}: {exc}") from None
        try:
            self.api.create_namespaced_config_map(
                self.namespace, {"metadata": {"name": self.name}, "data": body["data"]},
                _request_timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001
            raise ProfilingError(f"creating configmap {self.namespace}/{self.name}: "
                                 f"{' '.join(str(exc).split())}") from None


class ProfileLoop:
    """Scrape, attribute, record, write — every ``interval_s`` (module docstring).

    Args:
        url: dcgm-exporter's ``/metrics`` URL.
        node: this node's name.
        pods: where this node's pods are listed.
        sink: where measured profiles go.
        interval_s: seconds between scrapes.
        window: scrapes of a job alone that make one measurement.
    """

    def __init__(self, url: str, node: str, pods: PodSource, sink: ProfileSink, *,
                 interval_s: float = 10.0, window: int = 6) -> None:
        self.url = url
        self.node = node
        self.pods = pods
        self.sink = sink
        self.interval_s = interval_s
        self.recorder = Recorder(window=window, name=f"measured-{node}")
        self.errors = 0
        before = sink.read(node)
        if before:
            try:
                self.recorder.load(load_catalog_text(before, origin="previous measurements",
                                                     source="measured"))
            except ProfileError as exc:
                log.warning("previous measured profiles ignored: %s", exc)

    def tick(self) -> list[str]:
        """One scrape; returns the profile keys measured by it (written out when any).

        Raises:
            ProfilingError: the scrape, the pod list or the write failed.
        """
        text = scrape(self.url)
        try:
            readings = parse_exposition(text)
        except ProfileError as exc:
            raise ProfilingError(f"scraping {self.url}: {exc}") from None
        try:
            pods = self.pods.list_pods(self.node)
        except PodSourceError as exc:
            raise ProfilingError(str(exc)) from None
        done = self.recorder.observe(readings, subjects(pods, self.node))
        if done:
            self.sink.write(self.node, render(self.recorder.catalog(), self.node))
            for p in done:
                log.info("measured profile %s on node %s: C %.4g, M %.4g (%d window(s))",
                         p.key, self.node, p.kernel_occupancy, p.mem_bandwidth_util,
                         self.recorder.measurements(p.key or ""))
        return [p.key or "" for p in done]

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set (errors are logged and counted, never fatal)."""
        while not stop.is_set():
            try:
                self.tick()
            except ProfilingError as exc:
                self.errors += 1
                log.warning("%s", exc)
            stop.wait(self.interval_s)

    def start(self, stop: threading.Event) -> threading.Thread:
        """:meth:`run` in a daemon thread."""
        t = threading.Thread(target=self.run, args=(stop,), name="profile-recorder",
                             daemon=True)
        t.start()
        return t
