"""The DRA driver's checkpoint (dra_driver/checkpoint.py) as a file: what a save writes is what
a load reads, whole; a file that is not this node's version-1 checkpoint, or whose claims are
not what its checksum says, is refused with one line — the driver then does not start rather
than forget claims whose GPUs are in use. (The Preparer's use of it is in
``test_dra_prepare.py`` and ``test_dra_prepare_paths.py``.)"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.checkpoint import Checkpoint, CheckpointError, PreparedClaim
from tests.dra_driver.helpers import claim
from topology.dra import DeviceKind, GpuGrant

NODE = "dgx-0"


def _prepared(name: str, gpus: list[int], **kw: Any) -> PreparedClaim:
    c = claim(name, NODE, gpus, **kw)
    return PreparedClaim(c["metadata"]["uid"], c["metadata"]["namespace"], name, NODE,
                         tuple(c["status"]["allocation"]["devices"]["results"]))


def _write(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc))


def _signed(claims: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A checkpoint document with the right checksum over ``claims``."""
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
    return {"version": 1, "node": NODE, "claims": claims,
            "checksum": hashlib.sha256(canonical.encode()).hexdigest(), **top}


def test_what_is_saved_is_loaded(tmp_path: Path) -> None:
    ring = _prepared("ring", [6, 4, 5, 7])
    share = _prepared("s", [2], namespace="team", kind=DeviceKind.SHARE, core=30, mem=4096)
    cp = Checkpoint(tmp_path / "checkpoint.json", NODE)
    assert cp.load() == {}  # no file yet: nothing prepared
    cp.save({share.uid: share, ring.uid: ring})
    loaded = Checkpoint(tmp_path / "checkpoint.json", NODE).load()
    assert loaded == {ring.uid: ring, share.uid: share}
    assert loaded[share.uid].key == "team/s"
    assert loaded[ring.uid].allocation().gpus == (6, 4, 5, 7)
    (g,) = loaded[share.uid].allocation().grants
    assert (g.index, g.kind, g.core_percent, g.memory_mib) == (2, DeviceKind.SHARE, 30, 4096)
    assert g.share_id == share.devices[0]["shareID"]
    assert os.listdir(tmp_path) == ["checkpoint.json"]  # no temporary file left behind


def test_the_file_is_the_documented_shape(tmp_path: Path) -> None:
    """Other tools (and a person on the node) read it: version, node, checksum, claims by
    UID with namespace, name, pool and the devices as the API wrote them."""
    c = _prepared("c", [3])
    Checkpoint(tmp_path / "checkpoint.json", NODE).save({c.uid: c})
    doc = json.loads((tmp_path / "checkpoint.json").read_text())
    assert doc == _signed({c.uid: {"namespace": "default", "name": "c", "pool": NODE,
                                   "devices": [dict(d) for d in c.devices]}})


def test_saving_replaces_the_whole_file(tmp_path: Path) -> None:
    a, b = _prepared("a", [0]), _prepared("b", [1])
    cp = Checkpoint(tmp_path / "checkpoint.json", NODE)
    cp.save({a.uid: a, b.uid: b})
    cp.save({b.uid: b})
    assert cp.load() == {b.uid: b}
    cp.save({})
    assert cp.load() == {}


def test_a_failed_save_leaves_the_last_checkpoint_and_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fails the write (fsync: EIO): the error names the file in one line, the
    checkpoint saved before is still there whole, and the temporary file is gone."""
    a, b = _prepared("a", [0]), _prepared("b", [1])
    cp = Checkpoint(tmp_path / "checkpoint.json", NODE)
    cp.save({a.uid: a})

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(CheckpointError) as err:
        cp.save({a.uid: a, b.uid: b})
    assert str(err.value) == f"writing {tmp_path / 'checkpoint.json'}: Input/output error"
    monkeypatch.undo()
    assert cp.load() == {a.uid: a}
    assert os.listdir(tmp_path) == ["checkpoint.json"]


def test_a_save_into_a_missing_directory_is_refused(tmp_path: Path) -> None:
    a = _prepared("a", [0])
    with pytest.raises(CheckpointError, match=r"^writing .*checkpoint\.json: No such file"):
        Checkpoint(tmp_path / "gone" / "checkpoint.json", NODE).save({a.uid: a})


def test_a_checkpoint_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").mkdir()
    with pytest.raises(CheckpointError, match=r"^reading .*checkpoint\.json: Is a directory$"):
        Checkpoint(tmp_path / "checkpoint.json", NODE).load()


@pytest.mark.parametrize(("doc", "reason"), [
    ([], "not a version-1 checkpoint"),
    ({**_signed({}), "version": 2}, "not a version-1 checkpoint"),
    ({**_signed({}), "version": None}, "not a version-1 checkpoint"),
    ({k: v for k, v in _signed({}).items() if k != "version"}, "not a version-1 checkpoint"),
    ({**_signed({}), "node": "dgx-1"}, "belongs to node 'dgx-1', not 'dgx-0'"),
    ({k: v for k, v in _signed({}).items() if k != "node"}, "belongs to node None, not 'dgx-0'"),
    ({**_signed({}), "claims": []}, "no claims map"),
    ({k: v for k, v in _signed({}).items() if k != "claims"}, "no claims map"),
    ({**_signed({}), "checksum": None}, "checksum mismatch (corrupt checkpoint)"),
    (_signed({"u": {"namespace": "d", "name": "c", "pool": NODE}}), "claim u is malformed"),
    (_signed({"u": {"namespace": "d", "name": "c", "devices": []}}), "claim u is malformed"),
    (_signed({"u": {"namespace": "d", "pool": NODE, "devices": []}}), "claim u is malformed"),
    (_signed({"u": {"name": "c", "pool": NODE, "devices": []}}), "claim u is malformed"),
    (_signed({"u": {"namespace": "d", "name": "c", "pool": NODE, "devices": 3}}),
     "claim u is malformed"),
    (_signed({"u": ["d", "c"]}), "claim u is malformed"),
    (_signed({"u": {"namespace": "d", "name": "c", "pool": NODE,
                    "devices": [{"driver": "gpu.gputopo.io", "pool": NODE, "device": "cpu-1"}]}}),
     "claim d/c (u) in the checkpoint: "),
])
def test_a_checkpoint_that_is_not_this_nodes_is_refused_in_one_line(
        tmp_path: Path, doc: Any, reason: str) -> None:
    _write(tmp_path / "checkpoint.json", doc)
    with pytest.raises(CheckpointError) as err:
        Checkpoint(tmp_path / "checkpoint.json", NODE).load()
    assert reason in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(str(tmp_path / "checkpoint.json")) or \
        str(err.value).startswith("claim ")


def test_a_checksum_covers_every_claim_and_field(tmp_path: Path) -> None:
    a, b = _prepared("a", [0, 1]), _prepared("b", [2])
    Checkpoint(tmp_path / "checkpoint.json", NODE).save({a.uid: a, b.uid: b})
    good = json.loads((tmp_path / "checkpoint.json").read_text())
    changes: list[Callable[[dict[str, Any]], object]] = [
        lambda d: d["claims"].pop(a.uid),
        lambda d: d["claims"][b.uid].update(name="other"),
        lambda d: d["claims"][a.uid]["devices"].pop()]
    for change in changes:
        doc = json.loads(json.dumps(good))
        change(doc)
        _write(tmp_path / "checkpoint.json", doc)
        with pytest.raises(CheckpointError, match="checksum mismatch"):
            Checkpoint(tmp_path / "checkpoint.json", NODE).load()
    # a file laid out differently (indent, key order) with the same claims is the same file
    _write(tmp_path / "checkpoint.json", dict(reversed(list(good.items()))))
    assert set(Checkpoint(tmp_path / "checkpoint.json", NODE).load()) == {a.uid, b.uid}


def test_a_recorded_claim_whose_devices_no_longer_parse_is_named(tmp_path: Path) -> None:
    c = PreparedClaim("u-1", "team", "c", NODE,
                      ({"driver": "gpu.gputopo.io", "pool": "dgx-9", "device": "gpu-1"},))
    with pytest.raises(CheckpointError) as err:
        c.allocation()
    assert str(err.value).startswith("claim team/c (u-1) in the checkpoint: device gpu-1 ")
    ok = PreparedClaim("u-2", "team", "d", NODE,
                       ({"driver": "gpu.gputopo.io", "pool": NODE, "device": "gpu-1",
                         "request": "r"},))
    assert ok.allocation().grants == (GpuGrant(1, request="r"),)
    assert ok.allocation().pool == NODE
