"""The chart's pieces together, as deployed, minus the containers: the real ``gputopo extender``
started with the chart's settings file (the extender ConfigMap) as the chart's extender
ServiceAccount, behind the real kube-scheduler running the chart's KubeSchedulerConfiguration as
the chart's scheduler ServiceAccount, over HTTP and over HTTPS (the chart's TLS values).

A 4-GPU ring pod on idle DGX-1 V100 nodes must come out bound, with the gputopo annotations of
an NVLink-connected quartet, and neither component may log a permission error. Placement
quality itself is the end-to-end suite's business; this checks the deployment wiring.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import Binaries, ControlPlane
from localcluster.chart import render_manifests, render_scheduler_config
from localcluster.controlplane import free_port, wait_until
from tests.deploy.helpers import (
    NODES,
    POD_NS,
    bound_node,
    find,
    install_chart,
    make_pod,
    make_tls,
    sa_kubeconfig,
    tls_values,
)
from topology import catalog
from topology.contract import ANN_GPU_INDICES, ANN_NODE, ANN_PATTERN, parse_assignment
from topology.serialization import dumps

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

WAIT_S = 60.0
# The NVLink-connected quartets of a DGX-1 V100 (hybrid cube-mesh): each a 4-GPU ring of NVLinks.
DGX1_QUARTETS = ({0, 1, 2, 3}, {4, 5, 6, 7})


def _gputopo_exe() -> Path:
    exe = Path(sys.executable).parent / "gputopo"
    if not exe.is_file():
        pytest.skip(f"the gputopo command is not installed beside {sys.executable}")
    return exe


@pytest.fixture(scope="module", params=["http", "https"])
def stack(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[dict[str, Any]]:
    tls = make_tls() if request.param == "https" else None
    values = tls_values(tls) if tls else {}
    exe = _gputopo_exe()
    with ControlPlane(binaries) as cp:
        install_chart(cp, values)
        topology = dumps(catalog.get("dgx1-v100"))
        for n in NODES:
            cp.add_kwok_node(n, capacity={"cpu": 80, "memory": "512Gi", "nvidia.com/gpu": 8},
                             annotations={"gputopo.io/topology": topology})
        cp.create_default_serviceaccount(POD_NS)

        # The extender: the chart's settings file; flags only for what differs outside a pod
        # (listen address, the kubeconfig in place of the in-cluster token, the cert paths).
        settings = find(render_manifests(values), "ConfigMap", "gputopo-extender")
        settings_file = cp.workdir / "extender.yaml"
        settings_file.write_text(settings["data"]["extender.yaml"])
        # a sidecar (http variant, the default) runs as the scheduler pod's ServiceAccount
        sa = "gputopo-extender" if tls is not None else "gputopo-scheduler"
        port = free_port()
        args = [str(exe), "extender", f"--config={settings_file}", "--host=127.0.0.1",
                f"--port={port}", f"--kubeconfig={sa_kubeconfig(cp, sa)}"]
        ctx = None
        if tls is not None:
            (cp.workdir / "tls.crt").write_text(tls.cert)
            (cp.workdir / "tls.key").write_text(tls.key)
            (cp.workdir / "ca.crt").write_text(tls.ca_cert)
            args += [f"--tls-cert={cp.workdir / 'tls.crt'}", f"--tls-key={cp.workdir / 'tls.key'}"]
            ctx = ssl.create_default_context(cafile=str(cp.workdir / "ca.crt"))
        scheme = request.param
        url = f"{scheme}://127.0.0.1:{port}"
        log_path = cp.workdir / "logs" / "gputopo-extender.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_EXTENDER_")}
        with open(log_path, "w") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        try:
            def ready() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(f"extender exited: {log_path.read_text()[-2000:]}")
                with urllib.request.urlopen(f"{url}/readyz", timeout=2, context=ctx) as resp:
                    return bool(resp.status == 200)

            wait_until(ready, WAIT_S, "the extender's /readyz")

            cfg = yaml.safe_load(render_scheduler_config(url, **values))
            sched_kc = sa_kubeconfig(cp, "gputopo-scheduler")
            cfg["clientConnection"] = {"kubeconfig": str(sched_kc)}
            sched = cp.start_scheduler(
                yaml.safe_dump(cfg),
                extra_args=[f"--authentication-kubeconfig={sched_kc}",
                            f"--authorization-kubeconfig={sched_kc}"],
                name="gputopo-scheduler",
            )
            cp.core_v1().create_namespaced_pod(
                POD_NS, make_pod("ring", {"nvidia.com/gpu": "4"}, {ANN_PATTERN: "ring"}))
            node = wait_until(lambda: bound_node(cp, "ring"), WAIT_S, "the ring pod bound")
            pod = cp.core_v1().read_namespaced_pod("ring", POD_NS)
            yield {
                "node": node,
                "annotations": dict(pod.metadata.annotations or {}) if pod.metadata else {},
                "extender_log": log_path,
                "scheduler_log": sched.log_path,
            }
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_ring_pod_is_bound_on_an_nvlink_quartet(stack: dict[str, Any]) -> None:
    ann = stack["annotations"]
    assert ann[ANN_NODE] == stack["node"]
    assignment = parse_assignment(ann)
    assert set(assignment.gpu_indices) in DGX1_QUARTETS, ann[ANN_GPU_INDICES]
    assert assignment.effective_bandwidth_gbps > 0


def test_no_permission_errors(stack: dict[str, Any]) -> None:
    for key in ("extender_log", "scheduler_log"):
        text = Path(stack[key]).read_text(errors="replace")
        bad = [line for line in text.splitlines()
               if "forbidden" in line.lower() or " 403" in line or "Unauthorized" in line]
        assert not bad, f"{key}:\n" + "\n".join(bad[:10])
