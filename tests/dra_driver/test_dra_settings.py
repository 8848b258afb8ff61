"""DRA-driver settings: precedence, required values, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.settings import SettingsError, load_settings


def test_defaults_and_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    s = load_settings({})
    assert s.node_name == "gpu-7" and s.topology is None and not s.no_kubelet
    assert s.registration_socket == Path(
        "/var/lib/kubelet/plugins_registry/gpu.gputopo.io-reg.sock")
    assert s.dra_socket == Path("/var/lib/kubelet/plugins/gpu.gputopo.io/dra.sock")
    assert s.cdi_dir == Path("/var/run/cdi") and s.shared_slots == 3 and s.shares
    assert s.allocator_taint


def test_flag_beats_env_beats_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("node-name: from-file\nshared_slots: 2\ntopology: dgx1-v100\n")
    monkeypatch.setenv("GPUTOPO_DRA_SHARED_SLOTS", "1")
    s = load_settings({"node_name": "from-flag"}, cfg)
    assert (s.node_name, s.shared_slots, s.topology) == ("from-flag", 1, "dgx1-v100")
    # --no-allocator-taint > GPUTOPO_DRA_ALLOCATOR_TAINT > allocator-taint in the file
    cfg.write_text("node-name: n\nallocator-taint: false\n")
    assert load_settings({}, cfg).allocator_taint is False
    monkeypatch.setenv("GPUTOPO_DRA_ALLOCATOR_TAINT", "true")
    assert load_settings({}, cfg).allocator_taint is True
    assert load_settings({"allocator_taint": False}, cfg).allocator_taint is False


@pytest.mark.parametrize(("flags", "msg"), [
    ({}, "node name is required"),
    ({"node_name": "n", "no_kubelet": True}, "--no-kubelet needs --topology"),
    ({"node_name": "n", "shared_slots": "99"}, "shared-slots"),
    ({"node_name": "n", "claim_source": "etcd"}, "claim-source: must be 'kubernetes'"),
    ({"node_name": "n", "fake_xid_file": "/x"}, "fake_xid_file needs topology"),
])
def test_bad_settings(flags: dict[str, object], msg: str, monkeypatch: pytest.MonkeyPatch
                      ) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SettingsError, match=msg):
        load_settings(flags)
