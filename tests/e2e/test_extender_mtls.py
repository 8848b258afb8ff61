"""End to end: only the scheduler binds (issue 14). A standalone extender serving mutual TLS
(``--auth mtls``: client certificates from its CA, CN ``gputopo-scheduler`` allowed) and the
real kube-scheduler running the chart's configuration with ``extender.tls.clientAuth`` — its
extender ``tlsConfig`` presents the client certificate (``certFile``/``keyFile``, the chart's
pod paths rewritten to the files made here) — schedule GPU pods on kwok nodes, while callers
without a certificate get 401, with a certificate of another name 403, with one of another CA
a failed handshake, and none of them binds anything. The request counts of
``gputopo_extender_auth_requests_total`` are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from localcluster import Binaries, ControlPlane
from localcluster.chart import render_scheduler_config
from localcluster.gpucluster import (
    ExtenderProcess,
    GpuCluster,
    GpuPod,
    booking_problems,
    pod_node,
)
from localcluster.pki import ExtenderTls, generate_extender_tls

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

SCHEDULER_CN = "gputopo-scheduler"
NODES = {"dgx-0": "dgx1-v100", "dgx-1": "dgx1-v100"}
PODS = [GpuPod(f"m-{i}", gpus=g) for i, g in enumerate((4, 2, 1, 1, 2, 4))]
WAIT_S = 90.0


def _context(tls: ExtenderTls, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(tls.ca_cert))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


@pytest.fixture(scope="module")
def mtls(binaries: Binaries) -> Iterator[tuple[GpuCluster, ExtenderTls]]:
    with ControlPlane(binaries) as cp, GpuCluster(cp) as gc:
        tls = generate_extender_tls(cp.workdir / "extender-pki", (SCHEDULER_CN, "intruder"))
        gc.extender = ExtenderProcess(
            cp.kubeconfig_path, cp.workdir / "logs" / "gputopo-extender.log",
            extra_args=["--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key),
                        "--auth", "mtls", "--client-ca", str(tls.ca_cert),
                        "--allowed-client-name", SCHEDULER_CN],
            ssl_context=_context(tls, tls.clients[SCHEDULER_CN]),
        )
        gc.start(NODES.items(), extender=True, scheduler=False)
        ca = tls.ca_cert.read_text()
        text = render_scheduler_config(
            gc.extender.url,
            extender={"mode": "standalone", "tls": {
                "enabled": True, "secretName": "extender-tls", "caCert": ca,
                "clientAuth": {"enabled": True, "caCert": ca, "allowedNames": [SCHEDULER_CN],
                               "secretName": "scheduler-client"}}},
            scheduler={"leaderElection": {"enabled": False}},
        )  # fmt: skip
        cfg = yaml.safe_load(text)
        tls_config = cfg["extenders"][0]["tlsConfig"]
        # the chart mounts the client Secret here in the pod; locally, the files made above
        assert tls_config["certFile"] == "/etc/gputopo-scheduler-client/tls.crt"
        assert tls_config["keyFile"] == "/etc/gputopo-scheduler-client/tls.key"
        cert, key = tls.clients[SCHEDULER_CN]
        tls_config.update(certFile=str(cert), keyFile=str(key))
        gc.start_scheduler(yaml.safe_dump(cfg))
        yield gc, tls


def _post(url: str, body: dict[str, Any], ctx: ssl.SSLContext) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _auth_counts(gc: GpuCluster, ctx: ssl.SSLContext) -> dict[str, int]:
    with urllib.request.urlopen(f"{gc.extender.url}/metrics", timeout=10, context=ctx) as r:
        text = r.read().decode()
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("gputopo_extender_auth_requests_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            counts[result] = int(float(line.rsplit(" ", 1)[1]))
    return counts


def test_scheduler_with_client_certificate_binds_others_are_refused(
    mtls: tuple[GpuCluster, ExtenderTls],
) -> None:
    gc, tls = mtls
    # a pod no scheduler serves: the intruders try to bind it
    victim = GpuPod("victim", gpus=8)
    body = victim.manifest(gc.namespace, "nobody")
    gc.core.create_namespaced_pod(gc.namespace, cast(Any, body))
    uid = gc.pods_by_name(["victim"])["victim"]["metadata"]["uid"]
    bind = {"PodName": "victim", "PodNamespace": gc.namespace, "PodUID": uid, "Node": "dgx-0"}
    anonymous = _context(tls, None)
    status, reply = _post(f"{gc.extender.url}/bind", bind, anonymous)
    assert status == 401 and "client certificate" in reply["Error"]
    status, reply = _post(f"{gc.extender.url}/filter",
                          {"Pod": body, "NodeNames": list(NODES)}, anonymous)
    assert status == 401
    status, reply = _post(f"{gc.extender.url}/bind", bind,
                          _context(tls, tls.clients["intruder"]))
    assert status == 403 and "intruder" in reply["Error"]
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _post(f"{gc.extender.url}/bind", bind, _context(tls, (tls.rogue_cert, tls.rogue_key)))
    # the scheduler, presenting its certificate, schedules a stream of GPU pods
    for p in PODS:
        gc.create_pod(p)
    pods = gc.wait_bound([p.name for p in PODS], WAIT_S)
    problems = booking_problems(pods.values(), gc.nodes)
    assert not problems, "\n".join(problems)
    # nobody bound the victim
    assert pod_node(gc.pods_by_name(["victim"])["victim"]) is None
    counts = _auth_counts(gc, anonymous)  # /metrics needs no certificate
    print(f"\nmTLS auth requests: {counts} (kube-scheduler's filter/prioritize/bind calls "
          f"for {len(PODS)} pods are the ok ones)")
    assert counts["unauthenticated"] == 2 and counts["forbidden"] == 1
    assert counts["ok"] >= 2 * len(PODS)  # at least a filter and a bind per pod
