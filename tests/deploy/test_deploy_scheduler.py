"""The KubeSchedulerConfiguration the chart renders drives the real kube-scheduler.

For the default and the TLS variant: install the chart's objects in a fresh control plane, run
the pinned kube-scheduler with ``render_scheduler_config(<stub URL>)`` **as the chart's
ServiceAccount** (token from the TokenRequest API, so the chart's RBAC is what it gets), and
check that it

* becomes healthy and takes the ``gputopo-scheduler`` Lease in the release namespace,
* sends a GPU pod through the extender's filter, prioritize and bind verbs (over HTTPS with
  the CA from the values in the TLS variant),
* schedules a pod without GPU resources itself (managedResources keeps it off the extender),
* logs no RBAC ``forbidden`` error.

The extender is a stub that records calls and binds with admin credentials, so this tests the
wiring, not gputopo's placement (the end-to-end suite does that).
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from localcluster import Binaries, ControlPlane
from localcluster.chart import DEFAULT_NAMESPACE, render_scheduler_config
from localcluster.controlplane import wait_until
from tests.deploy.helpers import (
    NODES,
    POD_NS,
    TlsMaterial,
    bound_node,
    install_chart,
    make_pod,
    make_tls,
    sa_kubeconfig,
    tls_values,
)
from tests.http_replies import reply_json

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NS = DEFAULT_NAMESPACE
WAIT_S = 60.0


class StubExtender:
    """A minimal extender on 127.0.0.1: every node fits, node-b scores highest, bind binds."""

    def __init__(self, core: k8s_client.CoreV1Api, tls: TlsMaterial | None, workdir: Path):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub.lock:
                    stub.calls.append((self.path, body))
                reply_json(self, 200, stub.handle(self.path, body))

        self.core = core
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            (workdir / "stub.crt").write_text(tls.cert)
            (workdir / "stub.key").write_text(tls.key)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(workdir / "stub.crt", workdir / "stub.key")
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def paths(self) -> list[str]:
        with self.lock:
            return [p for p, _ in self.calls]

    def handle(self, path: str, body: dict[str, Any]) -> Any:
        if path == "/filter":
            return {"NodeNames": body.get("NodeNames") or [], "FailedNodes": {}, "Error": ""}
        if path == "/prioritize":
            return [{"Host": n, "Score": 10 if n == NODES[1] else 0}
                    for n in body.get("NodeNames") or []]
        if path == "/bind":
            binding = k8s_client.V1Binding(
                metadata=k8s_client.V1ObjectMeta(name=body["PodName"], uid=body["PodUID"]),
                target=k8s_client.V1ObjectReference(kind="Node", name=body["Node"]),
            )
            try:
                self.core.create_namespaced_binding(body["PodNamespace"], binding,
                                                    _preload_content=False)
            except ApiException as exc:
                return {"Error": f"bind failed: {exc.status}"}
            return {"Error": ""}
        return {"Error": f"unknown verb {path}"}

    def __enter__(self) -> StubExtender:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module", params=["http", "https"])
def scheduled(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[dict[str, Any]]:
    tls = make_tls() if request.param == "https" else None
    values = tls_values(tls) if tls else {}
    with ControlPlane(binaries) as cp:
        install_chart(cp, values)
        core = cp.core_v1()
        for n in NODES:
            cp.add_kwok_node(n, capacity={"cpu": 32, "memory": "256Gi", "nvidia.com/gpu": 8})
        cp.create_default_serviceaccount(POD_NS)
        with StubExtender(core, tls, cp.workdir) as stub:
            config_text = render_scheduler_config(stub.url, **values)
            cfg = yaml.safe_load(config_text)
            sched_kc = sa_kubeconfig(cp, "gputopo-scheduler")
            cfg["clientConnection"] = {"kubeconfig": str(sched_kc)}
            proc = cp.start_scheduler(
                yaml.safe_dump(cfg),
                extra_args=[f"--authentication-kubeconfig={sched_kc}",
                            f"--authorization-kubeconfig={sched_kc}"],
                name="gputopo-scheduler",
            )
            core.create_namespaced_pod(POD_NS, make_pod("gpu-pod", {"nvidia.com/gpu": "2"}))
            gpu_node = wait_until(lambda: bound_node(cp, "gpu-pod"), WAIT_S,
                                  "the GPU pod to be bound")
            core.create_namespaced_pod(POD_NS, make_pod("cpu-pod", {}))
            cpu_node = wait_until(lambda: bound_node(cp, "cpu-pod"), WAIT_S,
                                  "the CPU pod to be bound")
            lease = k8s_client.CoordinationV1Api(cp.api_client()).read_namespaced_lease(
                "gputopo-scheduler", NS)
            yield {
                "config": cfg, "stub": stub, "gpu_node": gpu_node, "cpu_node": cpu_node,
                "lease": lease, "log": proc.log_path.read_text(errors="replace"),
                "scheme": request.param, "tls": tls,
            }


def test_rendered_config_is_what_the_scheduler_ran(scheduled: dict[str, Any]) -> None:
    ext = scheduled["config"]["extenders"][0]
    assert ext["urlPrefix"] == scheduled["stub"].url
    if scheduled["scheme"] == "https":
        assert ext["enableHTTPS"] is True and ext["tlsConfig"]["caData"]
    else:
        assert "tlsConfig" not in ext


def test_scheduler_holds_its_own_lease(scheduled: dict[str, Any]) -> None:
    lease = scheduled["lease"]
    assert lease.metadata.namespace == NS
    assert lease.spec.holder_identity


def test_gpu_pod_goes_through_filter_prioritize_bind(scheduled: dict[str, Any]) -> None:
    stub: StubExtender = scheduled["stub"]
    paths = stub.paths()
    assert paths[:3] == ["/filter", "/prioritize", "/bind"], paths
    filter_body = stub.calls[0][1]
    # nodeCacheCapable: names only, no Node objects.
    assert sorted(filter_body["NodeNames"]) == sorted(NODES)
    assert not filter_body.get("Nodes")
    assert filter_body["Pod"]["metadata"]["name"] == "gpu-pod"
    # The extender's score decides between otherwise equal nodes (weight > 0).
    assert scheduled["gpu_node"] == NODES[1]
    bind = [b for p, b in stub.calls if p == "/bind"][0]
    assert bind["PodName"] == "gpu-pod" and bind["Node"] == NODES[1]


def test_pod_without_gpu_resources_skips_the_extender(scheduled: dict[str, Any]) -> None:
    stub: StubExtender = scheduled["stub"]
    assert scheduled["cpu_node"] in NODES
    names = [b.get("Pod", {}).get("metadata", {}).get("name") or b.get("PodName")
             for _, b in stub.calls]
    assert "cpu-pod" not in names


def test_scheduler_has_every_permission_it_uses(scheduled: dict[str, Any]) -> None:
    forbidden = [line for line in scheduled["log"].splitlines() if "forbidden" in line.lower()]
    assert not forbidden, "\n".join(forbidden[:10])
