"""Settings precedence: flags > environment (GPUTOPO_DP_*, NODE_NAME) > config file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_plugin.settings import DEFAULT_VGPU_MEMORY_UNIT_MIB, SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("GPUTOPO_DP_") or key == "NODE_NAME":
            monkeypatch.delenv(key)


def test_defaults() -> None:
    s = load_settings({"node_name": "n1"})
    assert s.device_plugin_dir == Path("/var/lib/kubelet/device-plugins/")
    assert s.kubelet_socket == Path("/var/lib/kubelet/device-plugins/kubelet.sock")
    assert s.kubeconfig is None and s.fake_topology is None
    assert s.vgpu_memory_unit_mib == DEFAULT_VGPU_MEMORY_UNIT_MIB
    assert s.pod_source == "kubernetes"


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "dp.yaml"
    cfg.write_text(
        "node-name: from-file\nmetrics_port: 1111\nvgpu-memory-unit-mib: 512\n"
        "fake-topology: dgx1-v100\n"
    )
    s = load_settings({}, cfg)
    assert (s.node_name, s.metrics_port, s.vgpu_memory_unit_mib) == ("from-file", 1111, 512)
    monkeypatch.setenv("NODE_NAME", "downward")
    monkeypatch.setenv("GPUTOPO_DP_METRICS_PORT", "2222")
    s = load_settings({}, cfg)
    assert (s.node_name, s.metrics_port, s.fake_topology) == ("downward", 2222, "dgx1-v100")
    monkeypatch.setenv("GPUTOPO_DP_NODE_NAME", "prefixed")
    assert load_settings({}, cfg).node_name == "prefixed"
    s = load_settings({"node_name": "flag", "metrics_port": "3333", "kubeconfig": None}, cfg)
    assert (s.node_name, s.metrics_port) == ("flag", 3333)
    monkeypatch.setenv("GPUTOPO_DP_CONFIG", str(cfg))
    monkeypatch.delenv("GPUTOPO_DP_METRICS_PORT")
    assert load_settings({}).metrics_port == 1111


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({}, "node name is required"),
        ({"node_name": "n", "metrics_port": "70000"}, "metrics-port"),
        ({"node_name": "n", "vgpu_memory_unit_mib": "0"}, "vgpu-memory-unit-mib"),
        ({"node_name": "n", "pod_source": "etcd"}, "pod-source"),
        ({"node_name": "n", "log_level": "loud"}, "log-level"),
        ({"node_name": "n", "fake_xid_file": "/x"}, "needs fake_topology"),
    ],
)
def test_invalid_settings_are_one_line_errors(flags, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SettingsError, match=message) as err:
        load_settings(flags)
    assert "\n" not in str(err.value)


def test_bad_config_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodename: x\n")
    with pytest.raises(SettingsError, match="unknown setting 'nodename'"):
        load_settings({}, bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(SettingsError, match="mapping"):
        load_settings({}, bad)
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_settings({}, tmp_path / "missing.yaml")
