"""NodePrepareResources' logic without gRPC (dra_driver/prepare.py): a claim's GPUs reach a CDI
spec exactly; nothing is prepared twice; a restart with the checkpoint loses nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cdi import read_spec, spec_path
from dra_driver.checkpoint import Checkpoint, CheckpointError
from dra_driver.prepare import ClaimSource, FileClaimSource, Preparer
from tests.dra_driver.helpers import claim, write_claims
from topology import catalog
from topology.dra import DeviceKind

TOPO = catalog.get("dgx1-v100")
NODE = "dgx-0"


def _env(spec_file: Path) -> dict[str, str]:
    spec = read_spec(spec_file)
    return dict(e.split("=", 1) for e in spec.containerEdits.env)


def _preparer(tmp: Path, unhealthy: frozenset[int] = frozenset(), *,
              claims: ClaimSource | None = None, checkpoint: Path | None = None,
              **kw: Any) -> Preparer:
    """A Preparer of ``NODE`` on ``tmp``: claims from ``tmp/claims.json`` (or ``claims``), the
    checkpoint ``tmp/checkpoint.json`` (or ``checkpoint``), specs in ``tmp/cdi``; ``kw`` are
    more of ``Preparer``'s keyword arguments."""
    (tmp / "cdi").mkdir(exist_ok=True)
    return Preparer(TOPO, NODE, claims or FileClaimSource(tmp / "claims.json"),
                    Checkpoint(checkpoint or tmp / "checkpoint.json", NODE), cdi_dir=tmp / "cdi",
                    minors={g.index: g.index for g in TOPO.gpus},
                    mps_pipe_dir=Path("/run/nvidia/mps"), unhealthy=lambda: unhealthy, **kw)


def test_prepare_writes_exactly_the_allocated_gpus_in_order(tmp_path: Path) -> None:
    c = claim("ring", NODE, [6, 4, 5, 7])
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    uid = c["metadata"]["uid"]
    r = p.prepare(uid, "default", "ring")
    assert r.error == ""
    assert [d.device for d in r.devices] == ["gpu-6", "gpu-4", "gpu-5", "gpu-7"]
    assert r.devices[0].cdi_device_ids == (f"gputopo.io/gpu={uid}-gpu-6",)
    assert r.devices[0].request_names == ("gpus",) and r.devices[0].pool == NODE
    env = _env(spec_path(tmp_path / "cdi", uid))
    uuids = ",".join(TOPO.gpus[i].uuid for i in (6, 4, 5, 7))
    assert env["CUDA_VISIBLE_DEVICES"] == uuids and env["NVIDIA_VISIBLE_DEVICES"] == uuids
    assert env["GPUTOPO_CPU_AFFINITY"] == "20-39,60-79" and env["GPUTOPO_NUMA_NODES"] == "1"
    assert env["GPUTOPO_CLAIM"] == "default/ring"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env


def test_share_and_slot_get_the_mps_environment(tmp_path: Path) -> None:
    share = claim("s", NODE, [2], kind=DeviceKind.SHARE, core=30, mem=4096)
    slot = claim("c", NODE, [3], kind=DeviceKind.SLOT, mem=2048)
    write_claims(tmp_path / "claims.json", [share, slot])
    p = _preparer(tmp_path)
    r = p.prepare(share["metadata"]["uid"], "default", "s")
    assert r.error == "" and r.devices[0].share_id is not None
    env = _env(spec_path(tmp_path / "cdi", share["metadata"]["uid"]))
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    assert env["CUDA_VISIBLE_DEVICES"] == TOPO.gpus[2].uuid
    assert p.prepare(slot["metadata"]["uid"], "default", "c").error == ""
    env = _env(spec_path(tmp_path / "cdi", slot["metadata"]["uid"]))
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"


def test_a_gpu_is_never_prepared_for_two_claims(tmp_path: Path) -> None:
    a, b = claim("a", NODE, [0, 1]), claim("b", NODE, [1, 2])
    s1 = claim("s1", NODE, [3], kind=DeviceKind.SHARE, core=70)
    s2 = claim("s2", NODE, [3], kind=DeviceKind.SHARE, core=40)
    w = claim("w", NODE, [3])
    write_claims(tmp_path / "claims.json", [a, b, s1, s2, w])
    p = _preparer(tmp_path)
    assert p.prepare(a["metadata"]["uid"], "default", "a").error == ""
    r = p.prepare(b["metadata"]["uid"], "default", "b")
    assert "GPU 1 is in use as gpu" in r.error and r.devices == ()
    assert not spec_path(tmp_path / "cdi", b["metadata"]["uid"]).exists()
    assert p.prepare(s1["metadata"]["uid"], "default", "s1").error == ""
    assert "110 % of its compute" in p.prepare(s2["metadata"]["uid"], "default", "s2").error
    assert "in use as share" in p.prepare(w["metadata"]["uid"], "default", "w").error
    # once a's GPUs are unprepared, b fits
    assert p.unprepare(a["metadata"]["uid"], "default", "a") == ""
    assert p.prepare(b["metadata"]["uid"], "default", "b").error == ""


def test_prepare_twice_answers_the_same_and_counts_once(tmp_path: Path) -> None:
    c = claim("c", NODE, [5])
    write_claims(tmp_path / "claims.json", [c])
    p = _preparer(tmp_path)
    uid = c["metadata"]["uid"]
    first = p.prepare(uid, "default", "c")
    spec_path(tmp_path / "cdi", uid).unlink()  # e.g. /var/run emptied by a reboot
    again = p.prepare(uid, "default", "c")
    assert again == first and spec_path(tmp_path / "cdi", uid).exists()
    assert p.holdings[5].claims == (uid,)


def test_restart_with_the_checkpoint_loses_nothing_and_prepares_nothing_twice(
    tmp_path: Path
) -> None:
    a, b = claim("a", NODE, [0, 1, 2, 3]), claim("b", NODE, [3, 4])
    write_claims(tmp_path / "claims.json", [a, b])
    p = _preparer(tmp_path)
    ra = p.prepare(a["metadata"]["uid"], "default", "a")
    before = json.loads((tmp_path / "checkpoint.json").read_text())
    # the driver restarts; the API server no longer serves claim a (it does not need to)
    write_claims(tmp_path / "claims.json", [b])
    p2 = _preparer(tmp_path)
    assert set(p2.prepared) == {a["metadata"]["uid"]}
    assert p2.prepare(a["metadata"]["uid"], "default", "a") == ra
    assert "GPU 3 is in use" in p2.prepare(b["metadata"]["uid"], "default", "b").error
    assert json.loads((tmp_path / "checkpoint.json").read_text()) == before
    assert p2.unprepare(a["metadata"]["uid"], "default", "a") == ""
    assert not spec_path(tmp_path / "cdi", a["metadata"]["uid"]).exists()
    assert p2.prepare(b["metadata"]["uid"], "default", "b").error == ""
    assert set(_preparer(tmp_path).prepared) == {b["metadata"]["uid"]}


def test_refusals_name_the_reason(tmp_path: Path) -> None:
    c = claim("c", NODE, [1])
    other = claim("o", "dgx-1", [1])
    nic_only = claim("n", NODE, [], extra=[{"request": "nic", "driver": "sriov.example.com",
                                             "pool": NODE, "device": "vf-0"}])
    write_claims(tmp_path / "claims.json", [c, other, nic_only])
    p = _preparer(tmp_path, unhealthy=frozenset({1}))
    assert "has UID" in p.prepare("not-the-uid", "default", "c").error
    assert "unhealthy" in p.prepare(c["metadata"]["uid"], "default", "c").error
    assert "not 'dgx-0'" in p.prepare(other["metadata"]["uid"], "default", "o").error
    assert "not found" in p.prepare("x", "default", "missing").error
    r = p.prepare(nic_only["metadata"]["uid"], "default", "n")
    assert r.error == "" and r.devices == ()
    assert p.unprepare("never-prepared", "default", "x") == ""


@pytest.mark.parametrize(("content", "reason"), [
    (b'{"items": 3}', "not a list of ResourceClaims"),
    (b'[3, {"metadata": 1}]', "not found"),
    (b"\xff\xfe", "not UTF-8 text"),
    (b"{", "reading claims file"),
])
def test_an_unreadable_claims_file_refuses_the_claim_in_one_line(
        tmp_path: Path, content: bytes, reason: str) -> None:
    """The claims file of a test cluster (FileClaimSource), hand-written: whatever it holds,
    the claim asked for is refused with one line, nothing raised."""
    (tmp_path / "claims.json").write_bytes(content)
    r = _preparer(tmp_path).prepare("uid-x", "default", "x")
    assert reason in r.error and "\n" not in r.error and r.devices == ()


def test_a_corrupt_or_foreign_checkpoint_stops_the_driver(tmp_path: Path) -> None:
    c = claim("c", NODE, [1])
    write_claims(tmp_path / "claims.json", [c])
    _preparer(tmp_path).prepare(c["metadata"]["uid"], "default", "c")
    doc = json.loads((tmp_path / "checkpoint.json").read_text())
    doc["claims"][c["metadata"]["uid"]]["devices"][0]["device"] = "gpu-2"
    (tmp_path / "checkpoint.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        _preparer(tmp_path)
    with pytest.raises(CheckpointError, match="belongs to node"):
        Checkpoint(tmp_path / "checkpoint.json", "other").load()
    (tmp_path / "checkpoint.json").write_text("{")
    with pytest.raises(CheckpointError, match="not JSON"):
        _preparer(tmp_path)
