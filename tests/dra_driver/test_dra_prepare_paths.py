"""NodePrepareResources / NodeUnprepareResources (dra_driver/prepare.py) on the paths the first
tests did not take: a write of the CDI spec or of the checkpoint failing (nothing half
prepared, nothing lost, the GPUs free again), the claim read from an API server, the parts of a
claim the kubelet and the container see (request names, the MPS mounts, missing device nodes),
and the claims file of a test cluster. (Found by mutation testing, docs/testing.md, fifteenth
round.)"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client

from dra_driver.cdi import read_spec, spec_path
from dra_driver.checkpoint import Checkpoint, CheckpointError, PreparedClaim
from dra_driver.prepare import ClaimSourceError, FileClaimSource, KubeClaimSource
from tests.dra_driver.helpers import claim, write_claims
from tests.dra_driver.test_dra_prepare import NODE, TOPO, _env, _preparer
from tests.http_replies import reply_json
from topology.colocation.model import DEFAULT_SLOTS
from topology.dra import DRIVER, DeviceKind


def _uid(c: dict[str, Any]) -> str:
    return str(c["metadata"]["uid"])


def _prepared_on_disk(tmp: Path) -> set[str]:
    return set(Checkpoint(tmp / "checkpoint.json", NODE).load())


# --------------------------------------------------------------------------- failed writes
def test_a_spec_that_cannot_be_written_prepares_nothing_and_holds_no_gpu(tmp_path: Path) -> None:
    a, b = claim("a", NODE, [2, 3]), claim("b", NODE, [3])
    write_claims(tmp_path / "claims.json", [a, b])
    p = _preparer(tmp_path)
    (tmp_path / "cdi").rmdir()  # the CDI directory is gone
    r = p.prepare(_uid(a), "default", "a")
    assert r.error.startswith("writing CDI spec ") and r.devices == ()
    assert _prepared_on_disk(tmp_path) == set() and p.prepared == {} and p.holdings == {}
    (tmp_path / "cdi").mkdir()
    # GPU 3 was not kept for a: b gets it, and a is refused for it now
    assert p.prepare(_uid(b), "default", "b").error == ""
    assert "GPU 3 is in use" in p.prepare(_uid(a), "default", "a").error


def test_a_checkpoint_that_cannot_be_written_prepares_nothing_and_leaves_no_spec(
        tmp_path: Path) -> None:
    a, b = claim("a", NODE, [5]), claim("b", NODE, [5])
    write_claims(tmp_path / "claims.json", [a, b])
    p = _preparer(tmp_path, checkpoint=tmp_path / "state" / "checkpoint.json")
    r = p.prepare(_uid(a), "default", "a")
    assert r.error.startswith("writing ") and "checkpoint.json" in r.error and r.devices == ()
    assert "\n" not in r.error
    assert not spec_path(tmp_path / "cdi", _uid(a)).exists()  # the kubelet was told no
    assert p.prepared == {} and p.holdings == {}
    (tmp_path / "state").mkdir()  # the kubelet retries; the write works now
    assert p.prepare(_uid(b), "default", "b").error == ""
    assert set(Checkpoint(tmp_path / "state" / "checkpoint.json", NODE).load()) == {_uid(b)}
    assert "GPU 5 is in use" in p.prepare(_uid(a), "default", "a").error


def test_a_directory_that_cannot_be_synced_after_the_rename_keeps_the_claim_everywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The checkpoint file is renamed into place and only the fsync of its directory fails:
    the file holds the claim, so the driver must too — prepared, its GPUs held, the kubelet
    answered with its devices — or an unprepare would find it unknown and leave it in the
    file, and a restarted driver would hold its GPUs for nobody. Only a warning says the
    rename may not survive a power cut."""
    a = claim("a", NODE, [4])
    write_claims(tmp_path / "claims.json", [a])
    p = _preparer(tmp_path)
    real_fsync = os.fsync

    def fsync_files_only(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_files_only)
    with caplog.at_level(logging.WARNING, logger="dra_driver.checkpoint"):
        r = p.prepare(_uid(a), "default", "a")
    assert r.error == "" and r.devices
    assert "could not be synced (Input/output error)" in caplog.text
    assert set(p.prepared) == _prepared_on_disk(tmp_path) == {_uid(a)}
    assert spec_path(tmp_path / "cdi", _uid(a)).exists()
    assert p.unprepare(_uid(a), "default", "a") == ""  # and it can be let go, from both
    assert p.prepared == {} and _prepared_on_disk(tmp_path) == set()


class _OneClaim:
    """A claim source answering ``doc`` for every claim (a source that has gone wrong)."""

    def __init__(self, doc: Any) -> None:
        self.doc = doc

    def get(self, namespace: str, name: str) -> Any:
        return self.doc


@pytest.mark.parametrize("doc", [{"metadata": []}, {"metadata": "x"}, {}, [], "claim"])
def test_a_claim_read_without_a_metadata_object_is_refused_not_raised(
        tmp_path: Path, doc: Any) -> None:
    """``prepare`` never raises: one claim read wrong fails that claim, not the kubelet's
    whole batch."""
    p = _preparer(tmp_path, claims=_OneClaim(doc))
    r = p.prepare("uid-1", "default", "a")
    assert r.error == "ResourceClaim default/a as read has no metadata object"
    assert r.devices == () and p.prepared == {} and p.holdings == {}


def test_a_failed_checkpoint_write_leaves_a_spec_it_cannot_remove_and_still_answers(
        tmp_path: Path) -> None:
    """The spec written, the checkpoint not, and the spec cannot be removed either (its path
    turned into a directory): still one error, nothing prepared, nothing raised."""
    c = claim("c", NODE, [1])
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path, checkpoint=tmp_path / "state" / "checkpoint.json")
    path = spec_path(tmp_path / "cdi", _uid(c))

    real_write = p._write_spec

    def write_then_block(uid: str, key: str, alloc: Any) -> None:
        real_write(uid, key, alloc)
        path.unlink()
        path.mkdir()  # unlink() of a directory fails: remove_spec raises CDIError

    p._write_spec = write_then_block  # type: ignore[method-assign]
    r = p.prepare(_uid(c), "default", "c")
    assert "checkpoint.json" in r.error and r.devices == () and p.prepared == {}


def test_an_unprepare_whose_checkpoint_write_fails_keeps_the_claim(tmp_path: Path) -> None:
    """The kubelet is told the unprepare failed, and retries: until then the claim is still
    prepared — its GPUs held, its answer the same — and a restart still knows it."""
    a, b = claim("a", NODE, [6, 7]), claim("b", NODE, [7])
    write_claims(tmp_path / "claims.json", [a, b])
    p = _preparer(tmp_path)
    first = p.prepare(_uid(a), "default", "a")
    (tmp_path / "checkpoint.json").unlink()
    (tmp_path / "checkpoint.json").mkdir()  # os.replace onto a directory fails
    err = p.unprepare(_uid(a), "default", "a")
    assert err.startswith("writing ") and "checkpoint.json" in err and "\n" not in err
    assert set(p.prepared) == {_uid(a)} and p.holdings[7].claims == (_uid(a),)
    assert "GPU 7 is in use" in p.prepare(_uid(b), "default", "b").error
    (tmp_path / "checkpoint.json").rmdir()
    assert p.prepare(_uid(a), "default", "a") == first  # the spec written again
    assert spec_path(tmp_path / "cdi", _uid(a)).exists()
    assert p.unprepare(_uid(a), "default", "a") == ""
    assert p.prepared == {} and p.holdings == {}
    assert p.prepare(_uid(b), "default", "b").error == ""


def test_unprepare_removes_a_spec_the_checkpoint_never_recorded(tmp_path: Path) -> None:
    """A spec left by a driver that stopped between writing it and the checkpoint: the
    kubelet's unprepare removes it although the claim is unknown."""
    c = claim("c", NODE, [0])
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    path = spec_path(tmp_path / "cdi", _uid(c))
    path.write_text("{}")
    assert p.unprepare(_uid(c), "default", "c") == "" and not path.exists()


def test_an_unprepare_whose_spec_cannot_be_removed_reports_it_and_keeps_the_claim(
        tmp_path: Path) -> None:
    c = claim("c", NODE, [4])
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    assert p.prepare(_uid(c), "default", "c").error == ""
    path = spec_path(tmp_path / "cdi", _uid(c))
    path.unlink()
    path.mkdir()
    (path / "x").write_text("")  # a directory with something in it: not removable as a file
    err = p.unprepare(_uid(c), "default", "c")
    assert err.startswith("removing CDI spec ") and "\n" not in err
    assert set(p.prepared) == {_uid(c)} and _prepared_on_disk(tmp_path) == {_uid(c)}
    assert p.holdings[4].claims == (_uid(c),)


def test_a_prepared_claim_whose_spec_cannot_be_rewritten_reports_it(tmp_path: Path) -> None:
    c = claim("c", NODE, [2])
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    assert p.prepare(_uid(c), "default", "c").error == ""
    spec_path(tmp_path / "cdi", _uid(c)).unlink()
    (tmp_path / "cdi").rmdir()
    r = p.prepare(_uid(c), "default", "c")
    assert r.error.startswith("writing CDI spec ") and r.devices == ()
    assert set(p.prepared) == {_uid(c)}  # still prepared: the next call writes it


def test_a_prepared_claims_spec_is_rewritten_as_it_was(tmp_path: Path) -> None:
    """After a reboot emptied the CDI directory the spec comes back from the checkpoint alone
    (the API server no longer has the claim): the same GPUs, the same claim name."""
    c = claim("c", NODE, [6, 4], namespace="team")
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    assert p.prepare(_uid(c), "team", "c").error == ""
    path = spec_path(tmp_path / "cdi", _uid(c))
    written = path.read_text()
    path.unlink()
    write_claims(tmp_path / "claims.json", [])
    p2 = _preparer(tmp_path)
    assert [d.device for d in p2.prepare(_uid(c), "team", "c").devices] == ["gpu-6", "gpu-4"]
    assert path.read_text() == written
    assert _env(path)["GPUTOPO_CLAIM"] == "team/c"


def test_every_cdi_device_answered_is_in_the_claims_spec(tmp_path: Path) -> None:
    """The container runtime resolves the answered CDI device IDs (``gputopo.io/gpu=<name>``)
    in the spec files: each one must name a device of the claim's spec, with its GPU."""
    c = claim("c", NODE, [6, 4])
    s = claim("s", NODE, [2], kind=DeviceKind.SHARE, core=20, mem=1024)
    write_claims(tmp_path / "claims.json", [c, s])
    p = _preparer(tmp_path)
    for x in (c, s):
        r = p.prepare(_uid(x), "default", x["metadata"]["name"])
        spec = read_spec(spec_path(tmp_path / "cdi", _uid(x)))
        by_id = {f"{spec.kind}={d.name}": d for d in spec.devices}
        for dev in r.devices:
            (cdi_id,) = dev.cdi_device_ids
            index = int(dev.device.split("-")[1])
            assert [n.path for n in by_id[cdi_id].containerEdits.deviceNodes] == [
                f"/dev/nvidia{index}"]


# --------------------------------------------------------------------------- the checkpoint
def test_a_checkpoint_whose_claims_overlap_stops_the_driver(tmp_path: Path) -> None:
    """Two recorded claims holding one GPU whole: the node cannot know which is real, so the
    driver does not start (rather than prepare GPU 3 a third time)."""
    a, b = claim("a", NODE, [2, 3]), claim("b", NODE, [3], namespace="team")
    Checkpoint(tmp_path / "checkpoint.json", NODE).save({
        _uid(a): PreparedClaim(_uid(a), "default", "a", NODE,
                               tuple(a["status"]["allocation"]["devices"]["results"])),
        _uid(b): PreparedClaim(_uid(b), "team", "b", NODE,
                               tuple(b["status"]["allocation"]["devices"]["results"])),
    })
    with pytest.raises(CheckpointError, match=r"^checkpoint claim (default/a|team/b): GPU 3 "):
        _preparer(tmp_path)


def test_a_restarted_driver_counts_the_recorded_shares_and_slots(tmp_path: Path) -> None:
    """The holdings are rebuilt from the checkpoint with the node's slot count: a share's
    compute and the slots taken before the restart still count after it."""
    s1 = claim("s1", NODE, [0], kind=DeviceKind.SHARE, core=60, mem=1024)
    s2 = claim("s2", NODE, [0], kind=DeviceKind.SHARE, core=50, mem=1024)
    c1 = claim("c1", NODE, [1], kind=DeviceKind.SLOT, mem=1024)
    c2 = claim("c2", NODE, [1], kind=DeviceKind.SLOT, mem=1024)
    write_claims(tmp_path / "claims.json", [s1, s2, c1, c2])
    p = _preparer(tmp_path, slots=1)
    assert p.prepare(_uid(s1), "default", "s1").error == ""
    assert p.prepare(_uid(c1), "default", "c1").error == ""
    p2 = _preparer(tmp_path, slots=1)
    assert "110 % of its compute" in p2.prepare(_uid(s2), "default", "s2").error
    assert "more than 1 co-location slots" in p2.prepare(_uid(c2), "default", "c2").error
    assert _preparer(tmp_path, slots=2).prepare(_uid(c2), "default", "c2").error == ""


def test_a_node_with_more_slots_than_the_default_restarts_with_them_all(tmp_path: Path) -> None:
    """A node configured for more co-location slots than the default: its full GPUs are
    rebuilt from the checkpoint under the node's count, not refused as overbooked (which
    would stop the driver with every slot in use)."""
    slots = [claim(f"c{i}", NODE, [1], kind=DeviceKind.SLOT, mem=512)
             for i in range(DEFAULT_SLOTS + 1)]
    write_claims(tmp_path / "claims.json", slots)
    p = _preparer(tmp_path, slots=DEFAULT_SLOTS + 1)
    assert all(p.prepare(_uid(c), "default", c["metadata"]["name"]).error == "" for c in slots)
    p2 = _preparer(tmp_path, slots=DEFAULT_SLOTS + 1)
    assert p2.holdings[1].slots == DEFAULT_SLOTS + 1 and set(p2.prepared) == {
        _uid(c) for c in slots}


def test_only_this_drivers_devices_are_recorded(tmp_path: Path) -> None:
    nic = {"request": "nic", "driver": "sriov.example.com", "pool": NODE, "device": "vf-0"}
    c = claim("c", NODE, [1, 0], extra=[nic])
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    r = p.prepare(_uid(c), "default", "c")
    assert [(d.device, d.request_names) for d in r.devices] == [
        ("gpu-1", ("gpus",)), ("gpu-0", ("gpus",))]
    recorded = _preparer(tmp_path).prepared[_uid(c)]
    assert recorded.key == "default/c" and recorded.pool == NODE
    assert [d["device"] for d in recorded.devices] == ["gpu-1", "gpu-0"]
    assert all(d["driver"] == DRIVER for d in recorded.devices)


# --------------------------------------------------------------------------- what is answered
def test_a_subrequests_device_is_answered_under_its_request(tmp_path: Path) -> None:
    """``gpus/large`` (a prioritized-list subrequest) is answered as ``gpus``: the name a
    container's ``resources.claims[].request`` uses."""
    c = claim("c", NODE, [3], request="gpus/large")
    write_claims(tmp_path / "claims.json", [c])
    r = _preparer(tmp_path).prepare(_uid(c), "default", "c")
    assert r.error == "" and r.devices[0].request_names == ("gpus",)
    assert r.devices[0].share_id is None


def test_a_device_without_a_request_is_answered_for_no_request(tmp_path: Path) -> None:
    c = claim("c", NODE, [3], request="")
    write_claims(tmp_path / "claims.json", [c])
    r = _preparer(tmp_path).prepare(_uid(c), "default", "c")
    assert r.error == "" and r.devices[0].request_names == ()


def test_a_shares_answer_carries_its_share_id(tmp_path: Path) -> None:
    s = claim("s", NODE, [2], kind=DeviceKind.SHARE, core=20, mem=1024)
    write_claims(tmp_path / "claims.json", [s])
    r = _preparer(tmp_path).prepare(_uid(s), "default", "s")
    sent = s["status"]["allocation"]["devices"]["results"][0]
    assert r.devices[0].share_id == sent["shareID"] and r.devices[0].device == "gpu-2-share"


def test_a_slots_spec_mounts_the_mps_shared_memory_and_only_existing_devices(
        tmp_path: Path) -> None:
    c = claim("c", NODE, [3], kind=DeviceKind.SLOT, mem=1024)
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path, mps_shm_dir=Path("/run/nvidia/mps-shm"),
                  device_exists=lambda path: path != "/dev/nvidia-uvm-tools")
    assert p.prepare(_uid(c), "default", "c").error == ""
    spec = read_spec(spec_path(tmp_path / "cdi", _uid(c)))
    assert ("/dev/shm", "/run/nvidia/mps-shm") in {
        (m.containerPath, m.hostPath) for m in spec.containerEdits.mounts}
    assert ("/run/nvidia/mps", "/run/nvidia/mps") in {
        (m.containerPath, m.hostPath) for m in spec.containerEdits.mounts}
    assert _env(spec_path(tmp_path / "cdi", _uid(c)))["CUDA_MPS_PIPE_DIRECTORY"] == (
        "/run/nvidia/mps")
    nodes = {n.path for n in spec.containerEdits.deviceNodes}
    assert "/dev/nvidiactl" in nodes and "/dev/nvidia-uvm-tools" not in nodes
    assert [n.path for n in spec.devices[0].containerEdits.deviceNodes] == ["/dev/nvidia3"]


def test_the_lowest_unhealthy_gpu_is_named(tmp_path: Path) -> None:
    c = claim("c", NODE, [5, 3, 1])
    write_claims(tmp_path / "claims.json", [c])
    r = _preparer(tmp_path, unhealthy=frozenset({5, 3, 0})).prepare(_uid(c), "default", "c")
    assert r.error == f"ResourceClaim default/c: GPU 3 of node {NODE} is unhealthy"
    assert r.devices == () and not spec_path(tmp_path / "cdi", _uid(c)).exists()


def test_a_claim_replaced_under_its_name_is_refused_with_both_uids(tmp_path: Path) -> None:
    c = claim("c", NODE, [1], uid="uid-new")
    gone = claim("g", NODE, [1])
    del gone["metadata"]["uid"]
    write_claims(tmp_path / "claims.json", [c, gone])
    p = _preparer(tmp_path)
    assert p.prepare("uid-old", "default", "c").error == (
        "ResourceClaim default/c has UID uid-new, not uid-old: it was replaced")
    assert p.prepare("uid-g", "default", "g").error == (
        "ResourceClaim default/g has UID (none), not uid-g: it was replaced")
    assert p.prepared == {} and p.holdings == {}


@pytest.mark.parametrize("status", [
    None, "allocated", {"allocation": None}, {"allocation": {"devices": None}},
    {"allocation": {"devices": {"results": None}}}, {"allocation": {"devices": "x"}},
])
def test_a_claim_with_no_allocation_to_read_prepares_nothing(
        tmp_path: Path, status: object) -> None:
    """Nothing allocated at any level (absent, null, not an object): nothing of this driver
    to prepare — an empty answer, no spec, no record."""
    c = {**claim("c", NODE, [1]), "status": status}
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    r = p.prepare(_uid(c), "default", "c")
    assert r.error == "" and r.devices == ()
    assert p.prepared == {} and not spec_path(tmp_path / "cdi", _uid(c)).exists()


def test_results_that_are_not_a_list_are_refused(tmp_path: Path) -> None:
    c = claim("c", NODE, [1])
    c["status"]["allocation"]["devices"]["results"] = {"device": "gpu-1"}
    write_claims(tmp_path / "claims.json", [c])
    assert _preparer(tmp_path).prepare(_uid(c), "default", "c").error == (
        "ResourceClaim default/c: status.allocation.devices.results is not a list")


# --------------------------------------------------------------------------- the claims file
def test_the_claims_file_finds_a_claim_by_namespace_and_name(tmp_path: Path) -> None:
    mine = claim("c", NODE, [1], namespace="team")
    same_name = claim("c", NODE, [2], namespace="other")
    same_ns = claim("d", NODE, [3], namespace="team")
    path = tmp_path / "claims.json"
    path.write_text(json.dumps([{"metadata": None}, 7, same_name, same_ns, mine]))
    assert FileClaimSource(path).get("team", "c") == mine
    path.write_text(json.dumps({"items": [same_ns, mine]}))  # kubectl get -o json
    assert FileClaimSource(path).get("team", "c") == mine
    with pytest.raises(ClaimSourceError, match=rf"^ResourceClaim team/x not found in {path}$"):
        FileClaimSource(path).get("team", "x")
    path.write_text(json.dumps({"kind": "List"}))
    with pytest.raises(ClaimSourceError, match="not found"):
        FileClaimSource(path).get("team", "c")


# --------------------------------------------------------------------------- the API server
class _ApiServer:
    """A stand-in kube-apiserver serving ResourceClaims at their ``resource.k8s.io/v1``
    paths; ``hold`` delays every answer by that many seconds."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.hold = 0.0
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                path = self.path.split("?")[0]
                outer.paths.append(path)
                time.sleep(outer.hold)
                parts = path.strip("/").split("/")
                found = None
                if (len(parts) == 7 and parts[:3] == ["apis", "resource.k8s.io", "v1"]
                        and parts[3] == "namespaces" and parts[5] == "resourceclaims"):
                    found = outer.claims.get((parts[4], parts[6]))
                status, doc = (200, found) if found is not None else (404, {
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404})
                reply_json(self, status, doc)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    def client(self) -> Any:
        cfg = k8s_client.Configuration()
        cfg.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        cfg.retries = False
        return k8s_client.ApiClient(cfg)


@pytest.fixture
def apiserver() -> Iterator[_ApiServer]:
    s = _ApiServer()
    thread = threading.Thread(target=s.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield s
    finally:
        s.server.shutdown()
        s.server.server_close()


def test_a_claim_is_read_from_the_api_server_as_sent(
        tmp_path: Path, apiserver: _ApiServer) -> None:
    """The claim as the API server sent it — the 1.36 fields (``shareID``,
    ``consumedCapacity``) the client's models would drop included — prepared from it."""
    s = claim("s", NODE, [4], namespace="team", kind=DeviceKind.SHARE, core=25, mem=2048)
    s["status"]["allocation"]["devices"]["results"][0]["futureField"] = {"x": 1}
    apiserver.claims[("team", "s")] = s
    source = KubeClaimSource(apiserver.client())
    assert source.get("team", "s") == s
    assert apiserver.paths == ["/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/s"]
    r = _preparer(tmp_path, claims=source).prepare(_uid(s), "team", "s")
    assert r.error == "" and r.devices[0].share_id == (
        s["status"]["allocation"]["devices"]["results"][0]["shareID"])
    env = _env(spec_path(tmp_path / "cdi", _uid(s)))
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_VISIBLE_DEVICES"] == TOPO.gpus[4].uuid


def test_a_claim_the_api_server_does_not_have_is_refused_in_one_line(
        tmp_path: Path, apiserver: _ApiServer) -> None:
    r = _preparer(tmp_path, claims=KubeClaimSource(apiserver.client())).prepare(
        "uid-x", "team", "gone")
    assert r.error == "reading ResourceClaim team/gone: HTTP 404 Not Found" and r.devices == ()


def test_an_api_server_that_does_not_answer_in_time_refuses_the_claim(
        tmp_path: Path, apiserver: _ApiServer) -> None:
    """The read is bounded by ``timeout_s``: a claim the API server answers only after it is
    refused in one line (the kubelet retries), not prepared late."""
    c = claim("c", NODE, [1], namespace="team")
    apiserver.claims[("team", "c")] = c
    apiserver.hold = 1.0
    p = _preparer(tmp_path, claims=KubeClaimSource(apiserver.client(), timeout_s=0.2))
    r = p.prepare(_uid(c), "team", "c")
    assert r.error.startswith("reading ResourceClaim team/c: ") and "\n" not in r.error
    assert "timed out" in r.error.lower() and r.devices == () and p.prepared == {}


def test_an_unreachable_api_server_refuses_the_claim_in_one_line(tmp_path: Path) -> None:
    cfg = k8s_client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard: nothing listens
    cfg.retries = False
    r = _preparer(tmp_path, claims=KubeClaimSource(k8s_client.ApiClient(cfg))).prepare(
        "uid-x", "team", "c")
    assert r.error.startswith("reading ResourceClaim team/c: ")
    assert "Connection refused" in r.error and "\n" not in r.error and r.devices == ()
