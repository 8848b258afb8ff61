"""The real ``gputopo dra-driver`` process, driven by a kubelet stand-in over the generated
gRPC stubs: registration (pluginregistration v1, DRAPlugin), NodePrepareResources writing a CDI
spec with exactly the allocated UUIDs, NodeUnprepareResources, a crash and restart with the
checkpoint (nothing lost, nothing prepared twice), both DRA API versions, and an unhealthy GPU
leaving the published slices. Claims, slices and the Node come from / go to files here (the
test-only sinks); tests/dra_driver/test_dra_apiserver.py does the same against kube-apiserver.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.api import dra_health_pb2 as health_pb
from dra_driver.cdi import read_spec, spec_path
from tests.dra_driver.helpers import claim, write_claims
from tests.dra_driver.kubelet_stub import Claim, DRAKubeletStub
from topology import catalog
from topology.contract import ANN_UNHEALTHY_GPUS
from topology.dra import ALLOCATOR_TAINT, DRIVER, DeviceKind

TOPO = catalog.get("dgx1-v100")
NODE = "dgx-0"


def gputopo_command() -> list[str]:
    exe = Path(sys.executable).parent / "gputopo"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gputopo_cli.main"]


def wait_for(pred: Callable[[], Any], timeout_s: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class DriverProcess:
    """``gputopo dra-driver`` with a fake DGX-1 and file sinks in a short temp directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for d in ("reg", "plugin", "cdi"):
            (root / d).mkdir(exist_ok=True)
        self.claims = root / "claims.json"
        self.slices = root / "slices.json"
        self.node = root / "node.json"
        self.xid = root / "xid"
        self.xid.write_text("")
        write_claims(self.claims, [])
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "driver.log"

    def start(self, *extra: str) -> None:
        cmd = [*gputopo_command(), "dra-driver", "--node-name", NODE, "--topology", "dgx1-v100",
               "--registry-dir", str(self.root / "reg"), "--plugin-dir",
               str(self.root / "plugin"), "--cdi-dir", str(self.root / "cdi"),
               "--claim-source", f"file:{self.claims}", "--slice-sink", f"file:{self.slices}",
               "--node-sink", f"file:{self.node}", "--fake-xid-file", str(self.xid),
               "--health-recovery", "0", "--publish-interval", "30", "--watch-interval", "0.2",
               *extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown (a crash)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    def stop(self) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(10)
        finally:
            self.proc = None

    def published(self) -> list[dict[str, Any]]:
        try:
            data: list[dict[str, Any]] = json.loads(self.slices.read_text())
            return data
        except (OSError, json.JSONDecodeError):
            return []


@pytest.fixture
def driver() -> Iterator[DriverProcess]:
    root = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # unix sockets: short paths
    d = DriverProcess(root)
    try:
        yield d
    finally:
        if d.proc is not None:
            d.proc.kill()
            d.proc.wait(10)
        if os.environ.get("GPUTOPO_KEEP_TEST_DIR") != "1":
            shutil.rmtree(root, ignore_errors=True)


def _uuids(spec_file: Path) -> list[str]:
    env = dict(e.split("=", 1) for e in read_spec(spec_file).containerEdits.env)
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"]
    return env["CUDA_VISIBLE_DEVICES"].split(",")


def _ref(c: dict[str, Any]) -> Claim:
    m = c["metadata"]
    return Claim(m["namespace"], m["name"], m["uid"])


def test_register_prepare_unprepare_restart(driver: DriverProcess) -> None:
    ring = claim("ring", NODE, [6, 4, 5, 7])
    late = claim("late", NODE, [7, 3])
    write_claims(driver.claims, [ring, late])
    driver.start()
    kubelet = DRAKubeletStub(driver.root / "reg")
    info = kubelet.register()
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert info.endpoint == str(driver.root / "plugin" / "dra.sock")
    assert kubelet.chosen == "v1.DRAPlugin"

    resp = kubelet.prepare(_ref(ring))
    got = resp.claims[ring["metadata"]["uid"]]
    assert got.error == ""
    uid = ring["metadata"]["uid"]
    assert [(d.pool_name, d.device_name, list(d.cdi_device_ids), list(d.request_names))
            for d in got.devices] == [
        (NODE, f"gpu-{i}", [f"gputopo.io/gpu={uid}-gpu-{i}"], ["gpus"]) for i in (6, 4, 5, 7)]
    spec_file = spec_path(driver.root / "cdi", uid)
    assert _uuids(spec_file) == [TOPO.gpus[i].uuid for i in (6, 4, 5, 7)]

    refused = kubelet.prepare(_ref(late)).claims[late["metadata"]["uid"]]
    assert "GPU 7 is in use as gpu" in refused.error and not refused.devices
    checkpoint = (driver.root / "plugin" / "checkpoint.json").read_text()

    # crash, restart: the prepared claim is still prepared, answered the same, not twice
    driver.kill()
    kubelet.close()
    driver.start()
    kubelet = DRAKubeletStub(driver.root / "reg")
    kubelet.register()
    again = kubelet.prepare(_ref(ring)).claims[uid]
    assert again == got
    assert "GPU 7 is in use" in kubelet.prepare(_ref(late)).claims[
        late["metadata"]["uid"]].error
    assert (driver.root / "plugin" / "checkpoint.json").read_text() == checkpoint

    out = kubelet.unprepare(_ref(ring))
    assert out.claims[uid].error == ""
    assert not spec_file.exists()
    assert kubelet.prepare(_ref(late)).claims[late["metadata"]["uid"]].error == ""
    assert _uuids(spec_path(driver.root / "cdi", late["metadata"]["uid"])) == [
        TOPO.gpus[7].uuid, TOPO.gpus[3].uuid]
    kubelet.close()
    assert driver.stop() == 0
    assert not (driver.root / "reg" / f"{DRIVER}-reg.sock").exists()


def test_v1beta1_kubelet_and_a_share(driver: DriverProcess) -> None:
    share = claim("s", NODE, [2], kind=DeviceKind.SHARE, core=30, mem=4096)
    write_claims(driver.claims, [share])
    driver.start()
    kubelet = DRAKubeletStub(driver.root / "reg", services=("v1beta1.DRAPlugin",))
    kubelet.register()
    assert kubelet.chosen == "v1beta1.DRAPlugin"
    got = kubelet.prepare(_ref(share)).claims[share["metadata"]["uid"]]
    assert got.error == "" and [d.device_name for d in got.devices] == ["gpu-2-share"]
    env = dict(e.split("=", 1) for e in read_spec(
        spec_path(driver.root / "cdi", share["metadata"]["uid"])).containerEdits.env)
    assert env["CUDA_VISIBLE_DEVICES"] == TOPO.gpus[2].uuid
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    kubelet.close()


def test_an_unhealthy_gpu_leaves_the_slices(driver: DriverProcess) -> None:
    c = claim("c", NODE, [2])
    write_claims(driver.claims, [c])
    driver.start()

    def devices() -> list[str]:
        return [d["name"] for s in driver.published() for d in s["spec"].get("devices", [])]

    wait_for(lambda: len(devices()) == 24, what="the first publication")
    assert {s["spec"]["pool"]["generation"] for s in driver.published()} == {1}
    # by default every device carries the allocator taint
    assert all(d["taints"] == [ALLOCATOR_TAINT] for s in driver.published()
               for d in s["spec"].get("devices", []))
    kubelet = DRAKubeletStub(driver.root / "reg")
    kubelet.register()
    stream = kubelet.watch_health()
    first = next(stream)
    assert len(first.devices) == 24 and {d.health for d in first.devices} == {
        health_pb.HEALTHY}
    assert all(d.device.pool_name == NODE and d.health_check_timeout_seconds == 30
               for d in first.devices)
    with open(driver.xid, "a") as f:
        f.write("2 48\n")  # a double-bit ECC error: critical
    wait_for(lambda: len(devices()) == 21, what="GPU 2 to leave the slices")
    assert not any(n.startswith("gpu-2") for n in devices())
    assert {s["spec"]["pool"]["generation"] for s in driver.published()} == {2}
    node = json.loads(driver.node.read_text())
    wait_for(lambda: json.loads(driver.node.read_text())["annotations"][ANN_UNHEALTHY_GPUS]
             == "2", what="the Node annotation")
    assert node["node"] == NODE
    report = next(stream)  # the health stream reports the change at once
    bad = {d.device.device_name: d.message for d in report.devices
           if d.health == health_pb.UNHEALTHY}
    assert set(bad) == {"gpu-2", "gpu-2-share", "gpu-2-slot"}
    assert "critical XID 48" in bad["gpu-2"]
    stream.cancel()
    err = kubelet.prepare(_ref(c)).claims[c["metadata"]["uid"]].error
    assert "GPU 2 of node dgx-0 is unhealthy" in err
    kubelet.close()


def test_slices_wiped_by_a_starting_kubelet_come_back_at_registration(
    driver: DriverProcess
) -> None:
    """A starting kubelet deletes its node's ResourceSlices, then registers the plugin again:
    the driver republishes at once (not at its next resync, 30 s here). (Here without the
    allocator taint: --no-allocator-taint leaves it off every device.)"""
    driver.start("--no-allocator-taint")

    def devices() -> int:
        return sum(len(s["spec"].get("devices", [])) for s in driver.published())

    wait_for(lambda: devices() == 24, what="the first publication")
    driver.slices.write_text("[]")  # the kubelet's wipeResourceSlices
    kubelet = DRAKubeletStub(driver.root / "reg")
    kubelet.register()
    wait_for(lambda: devices() == 24, 10, "the slices to be republished")
    # one generation up: consumers that kept the old slices must drop them
    assert {s["spec"]["pool"]["generation"] for s in driver.published()} == {2}
    assert not any("taints" in d for s in driver.published()
                   for d in s["spec"].get("devices", []))
    kubelet.close()


def test_bad_settings_exit_2_and_a_foreign_checkpoint_exits_1(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gputopo_cli.main import app

    runner = CliRunner()
    r = runner.invoke(app, ["dra-driver", "--node-name", "n", "--no-kubelet"])
    assert r.exit_code == 2 and "--no-kubelet needs --topology" in r.output
    r = runner.invoke(app, ["dra-driver", "--node-name", "n", "--topology", "nope"])
    assert r.exit_code == 1 and "unknown topology 'nope'" in r.output
    (tmp_path / "checkpoint.json").write_text(json.dumps(
        {"version": 1, "node": "elsewhere", "checksum": "", "claims": {}}))
    r = runner.invoke(app, ["dra-driver", "--node-name", "n", "--topology", "dgx1-v100",
                            "--plugin-dir", str(tmp_path), "--claim-source",
                            f"file:{tmp_path}/c.json", "--slice-sink", f"file:{tmp_path}/s.json",
                            "--node-sink", f"file:{tmp_path}/n.json"])
    assert r.exit_code == 1
    assert "gputopo: error: checkpoint:" in r.output and "belongs to node 'elsewhere'" in r.output
