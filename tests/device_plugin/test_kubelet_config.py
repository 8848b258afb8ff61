"""Where the plugin learns its kubelet's NUMA-alignment settings: its own settings, then the
kubelet's KubeletConfiguration file, then the kubelet's defaults (device_plugin.kubelet_config);
and the labels it publishes for them (gpunode.publish.node_metadata)."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_plugin.kubelet_config import (
    KubeletConfigFileError,
    read_kubelet_config_file,
    resolve_kubelet_config,
)
from device_plugin.settings import SettingsError, load_settings
from gpunode.publish import node_metadata
from topology import catalog
from topology.contract import KUBELET_CONFIG_LABELS, LABEL_TOPOLOGY_MANAGER_POLICY
from topology.numa_alignment import KubeletConfig, KubeletConfigError, kubelet_config_from_labels

KUBELET_YAML = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: static
reservedSystemCPUs: "0,40"
topologyManagerPolicy: restricted
topologyManagerScope: pod
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
"""


def test_the_kubelet_file_is_read(tmp_path: Path) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(KUBELET_YAML)
    config, source = resolve_kubelet_config(file=f)
    assert config == KubeletConfig("restricted", "pod", "static", prefer_closest_numa=True)
    assert source == str(f)


def test_settings_win_over_the_file_and_defaults_fill_the_rest(tmp_path: Path) -> None:
    f = tmp_path / "config.yaml"
    f.write_text("kind: KubeletConfiguration\ntopologyManagerPolicy: best-effort\n")
    config, source = resolve_kubelet_config(file=f, policy="single-numa-node")
    assert config == KubeletConfig("single-numa-node", "container", "none")
    assert source == "kubelet default, setting"
    assert resolve_kubelet_config() == (KubeletConfig(), "kubelet default")


@pytest.mark.parametrize(("text", "message"), [
    ("kind: KubeletConfiguration\ntopologyManagerPolicy: strict\n", "'strict'"),
    ("kind: KubeletConfiguration\ntopologyManagerPolicyOptions:\n"
     "  prefer-closest-numa-nodes: sometimes\n", "prefer-closest-numa-nodes"),
    ("kind: KubeletConfiguration\ncpuManagerPolicy: dynamic\n", "cpuManagerPolicy"),
])
def test_values_the_kubelet_rejects_are_named(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    with pytest.raises(KubeletConfigError, match=message):
        resolve_kubelet_config(file=f)


@pytest.mark.parametrize(("text", "message"), [
    ("kind: KubeProxyConfiguration\n", "not a KubeletConfiguration"),
    ("- a\n- b\n", "not a mapping"),
    ("key: [unclosed\n", "not YAML"),
])
def test_a_file_that_is_not_a_kubelet_config_is_refused(tmp_path: Path, text: str,
                                                        message: str) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    with pytest.raises(KubeletConfigFileError, match=message):
        read_kubelet_config_file(f)
    with pytest.raises(KubeletConfigFileError, match="cannot read"):
        read_kubelet_config_file(tmp_path / "missing.yaml")


def test_settings_validate_the_values() -> None:
    s = load_settings({"node_name": "n", "kubelet_topology_manager_policy": " restricted "})
    assert s.kubelet_topology_manager_policy == "restricted"
    assert load_settings({"node_name": "n", "kubelet_cpu_manager_policy": ""}) \
        .kubelet_cpu_manager_policy is None
    with pytest.raises(SettingsError, match="kubelet-topology-manager-scope"):
        load_settings({"node_name": "n", "kubelet_topology_manager_scope": "node"})


def test_the_node_publishes_all_four_labels() -> None:
    """Always all four, so a node switched back to none is seen as none."""
    topo = catalog.get("dgx1-v100")
    labels = node_metadata(topo, frozenset(), 256).labels
    assert {k: labels[k] for k in KUBELET_CONFIG_LABELS} == {
        "gputopo.io/topology-manager-policy": "none",
        "gputopo.io/topology-manager-scope": "container",
        "gputopo.io/cpu-manager-policy": "none",
        "gputopo.io/topology-manager-prefer-closest-numa": "false",
    }
    snn = KubeletConfig("single-numa-node", cpu_manager_policy="static")
    labels = node_metadata(topo, frozenset(), 256, kubelet=snn).labels
    assert labels[LABEL_TOPOLOGY_MANAGER_POLICY] == "single-numa-node"
    assert kubelet_config_from_labels(labels) == snn
