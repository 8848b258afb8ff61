"""Measured co-location profiles: dcgm-exporter's exposition text served over HTTP on
loopback, scraped by the device plugin's profile loop, attributed to the pod running alone
on each GPU, recorded for its profile key — and read by the extender's measured layer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from device_plugin.pods import MemoryPodSource, make_pod
from device_plugin.profiling import (
    ConfigMapProfileSink,
    FileProfileSink,
    ProfileLoop,
    ProfilingError,
    scrape,
    subjects,
)
from device_plugin.settings import DevicePluginSettings
from scheduler_extender.profiles import ProfileLayers
from tests.device_plugin.helpers import NODE, decide
from tests.http_replies import reply
from tests.topology.colocation.test_colocation_dcgm import exposition
from topology import catalog
from topology.colocation.profile import load_catalog_text
from topology.colocation.sources import resolve_profile
from topology.contract import (
    ANN_ITERATION_MS,
    ANN_PROFILE,
    RESOURCE_GPU,
    assignment_annotations,
)
from topology.policies.base import NodeState, Request

TOPO = catalog.get("dgx1-v100")


class Exporter:
    """A dcgm-exporter stand-in on loopback: each GET /metrics serves the next text (the
    last one repeats)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)
        self.served = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                text = outer.texts[min(outer.served, len(outer.texts) - 1)]
                outer.served += 1
                reply(self, 200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    ex = Exporter([exposition(o, d) for o, d in [(0.30, 0.18), (0.40, 0.22), (0.35, 0.20)]])
    yield ex
    ex.close()


def running_pod(name: str, gpus: tuple[int, ...], ann: dict[str, str] | None = None,
                namespace: str = "ml") -> dict[str, Any]:
    """A Running pod holding ``gpus`` by gputopo's assignment (the exposition fixture
    attributes GPU 0 to ``ml/train-0``)."""
    d = decide(TOPO, NodeState.whole(set(range(8)) - set(gpus)), Request(count=len(gpus)))
    assert d.gpus == gpus
    annotations = assignment_annotations(d, NODE)
    annotations.update(ann or {})
    return make_pod(name, NODE, namespace=namespace, annotations=annotations,
                    limits={RESOURCE_GPU: len(gpus)}, phase="Running")


def test_scrape_over_http(exporter: Exporter) -> None:
    text = scrape(exporter.url)
    assert "DCGM_FI_PROF_SM_OCCUPANCY" in text
    with pytest.raises(ProfilingError, match="HTTP|404"):
        scrape(exporter.url.replace("/metrics", "/nope"))
    with pytest.raises(ProfilingError):
        scrape("http://127.0.0.1:1/metrics", timeout_s=1)


def test_a_job_alone_is_measured_for_its_key(exporter: Exporter, tmp_path: Path) -> None:
    pods = MemoryPodSource([running_pod("train-0", (0,), {ANN_PROFILE: "mynet:32",
                                                        ANN_ITERATION_MS: "50"})])
    sink = FileProfileSink(tmp_path / "measured.yaml")
    loop = ProfileLoop(exporter.url, NODE, pods, sink, window=3)
    assert loop.tick() == [] and loop.tick() == []
    assert loop.tick() == ["mynet:32"]
    doc = yaml.safe_load((tmp_path / "measured.yaml").read_text())
    assert doc["kind"] == "ColocationProfiles" and doc["metadata"]["name"] == f"measured-{NODE}"
    cat = load_catalog_text((tmp_path / "measured.yaml").read_text(), source="measured")
    p = cat["mynet:32"]
    # mean occupancy 0.35 × 100 × 2 iterations × 50 000 µs (Tabrizian Eq. 4.3 units)
    assert p.kernel_occupancy == pytest.approx(3.5e6)
    assert p.mem_bandwidth_util == pytest.approx(2.0e6)
    assert p.iteration_s == 0.05 and p.gpu_memory_mib == 1843  # DCGM_FI_DEV_FB_USED
    # a restarted plugin continues from what it wrote: a second window is averaged in
    again = ProfileLoop(exporter.url, NODE, pods, sink, window=3)
    assert again.recorder.measurements("mynet:32") == 1
    for _ in range(3):
        again.tick()
    assert again.recorder.measurements("mynet:32") == 2
    assert load_catalog_text(sink.read(NODE) or "")["mynet:32"].kernel_occupancy == \
        pytest.approx((3.5e6 + 0.35 * 2e8 * 0.05) / 2)


def test_only_jobs_alone_with_a_key_and_a_time_are_measured(exporter: Exporter) -> None:
    pods = [
        running_pod("multi", (0, 1), {ANN_PROFILE: "big:8", ANN_ITERATION_MS: "10"}),
        running_pod("nokey", (2,), {ANN_ITERATION_MS: "10"}),
        running_pod("catalog", (3,), {ANN_PROFILE: "resnet18:64"}),  # time from the catalog
        running_pod("notime", (4,), {ANN_PROFILE: "unknown:1"}),
        make_pod("pending", NODE, annotations={ANN_PROFILE: "x:1"}, phase="Pending"),
    ]
    from device_plugin.pods import PodInfo

    found = subjects([PodInfo.from_dict(p) for p in pods], NODE)
    assert set(found) == {3}
    assert found[3].key == "resnet18:64" and found[3].iteration_s == pytest.approx(0.0467)
    assert found[3].pod == "ml/catalog"


def test_another_pod_on_the_gpu_breaks_the_window(tmp_path: Path) -> None:
    """dcgm-exporter attributes GPU 0 to a second pod in the middle scrape: no measurement."""
    ex = Exporter([exposition(0.3, 0.2), exposition(0.3, 0.2, extra_pod="intruder"),
                   exposition(0.3, 0.2)])
    try:
        pods = MemoryPodSource([running_pod("train-0", (0,), {ANN_PROFILE: "mynet:32",
                                                              ANN_ITERATION_MS: "50"})])
        loop = ProfileLoop(ex.url, NODE, pods, FileProfileSink(tmp_path / "m.yaml"), window=2)
        assert [loop.tick() for _ in range(3)] == [[], [], []]
        assert loop.tick() == ["mynet:32"]  # two clean scrapes after it
    finally:
        ex.close()


def test_the_extender_reads_measured_profiles(exporter: Exporter, tmp_path: Path) -> None:
    """The measured layer (a directory, as a mounted ConfigMap with one key per node) is
    consulted for keys no catalog knows."""
    measured = tmp_path / "measured"
    measured.mkdir()
    pods = MemoryPodSource([running_pod("train-0", (0,), {ANN_PROFILE: "mynet:32",
                                                        ANN_ITERATION_MS: "50"})])
    loop = ProfileLoop(exporter.url, NODE, pods, FileProfileSink(measured / f"{NODE}.yaml"),
                       window=3)
    layers = ProfileLayers(measured_file=measured)
    inputs = layers.snapshot()
    assert resolve_profile({ANN_PROFILE: "mynet:32"}, catalog=inputs.catalog,
                           measured=inputs.measured).source == "default"
    for _ in range(3):
        loop.tick()
    inputs = layers.snapshot()
    p = resolve_profile({ANN_PROFILE: "mynet:32"}, catalog=inputs.catalog,
                        measured=inputs.measured)
    assert p.source == "measured" and p.kernel_occupancy == pytest.approx(3.5e6)


class FakeConfigMaps:
    """CoreV1Api's ConfigMap calls over a dict (404 until created)."""

    def __init__(self) -> None:
        self.data: dict[str, str] | None = None
        self.calls: list[str] = []

    def read_namespaced_config_map(self, name: str, ns: str, **_: Any) -> Any:
        self.calls.append("read")
        if self.data is None:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=404, reason="Not Found")
        return type("CM", (), {"data": dict(self.data)})()

    def patch_namespaced_config_map(self, name: str, ns: str, body: Any, **_: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        self.calls.append("patch")
        if self.data is None:
            raise ApiException(status=404, reason="Not Found")
        self.data.update(body["data"])

    def create_namespaced_config_map(self, ns: str, body: Any, **_: Any) -> None:
        self.calls.append("create")
        self.data = dict(body["data"])


def test_configmap_sink_keys_by_node() -> None:
    api = FakeConfigMaps()
    sink = ConfigMapProfileSink(api, "gputopo-system", "gputopo-measured-profiles")
    assert sink.read("n1") is None
    sink.write("n1", "a: 1\n")
    sink.write("n2", "b: 2\n")
    assert api.calls == ["read", "patch", "create", "patch"]
    assert api.data == {"n1.yaml": "a: 1\n", "n2.yaml": "b: 2\n"}
    assert sink.read("n2") == "b: 2\n"


@pytest.mark.parametrize("extra, message", [
    ({"dcgm_exporter_url": "http://x:9400/metrics"}, "profile_sink"),
    ({"dcgm_exporter_url": "ftp://x", "profile_sink": "file:/tmp/x"}, "http"),
    ({"dcgm_exporter_url": "http://x", "profile_sink": "configmap:only-name"}, "profile_sink"),
])
def test_settings_validated(extra: dict[str, str], message: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        DevicePluginSettings(node_name="n", **extra)
