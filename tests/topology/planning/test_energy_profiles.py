"""Energy cost c_ng (ANDREAS §V-A), job profiles and learning per-epoch times (§III)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.planning.energy import (
    BUILTIN_POWER,
    EnergyError,
    EnergyPrice,
    PowerProfile,
    gpu_model_key,
    node_cost_eur_per_h,
    power_for,
)
from topology.planning.profiles import (
    EpochObservation,
    EpochTimeLearner,
    ProfileError,
    config_key,
    estimate_epoch_time,
    load_profiles,
    parse_config_key,
    remaining_epochs,
)


def test_c_ng_from_power_pue_and_price() -> None:
    """c_ng = (idle + g · gpu) W / 1000 x PUE x EUR/kWh: a V100 node with 2 busy GPUs draws
    250 + 2 x 250 = 750 W -> 0.75 x 1.33 x 0.172 = 0.171570 EUR/h."""
    p = PowerProfile(250.0, 250.0)
    assert node_cost_eur_per_h(p, 2, EnergyPrice()) == pytest.approx(0.171570)
    assert node_cost_eur_per_h(p, 0, EnergyPrice(pue=1.0, eur_per_kwh=1.0)) == 0.25
    assert EnergyPrice().eur(1000.0, 1800.0) == pytest.approx(0.5 * 1.33 * 0.172)


def test_defaults_are_the_papers() -> None:
    price = EnergyPrice()
    assert (price.pue, price.eur_per_kwh) == (1.33, 0.172)


def test_bad_power_and_price_are_rejected() -> None:
    with pytest.raises(EnergyError):
        PowerProfile(-1.0, 10.0)
    with pytest.raises(EnergyError):
        PowerProfile(1.0, math.inf)
    with pytest.raises(EnergyError, match="pue"):
        EnergyPrice(pue=0.9)
    with pytest.raises(EnergyError):
        PowerProfile(1, 1).watts(-1)


def test_gpu_model_keys() -> None:
    assert gpu_model_key("Tesla V100-PCIE-32GB") == "v100-pcie-32gb"
    assert gpu_model_key("NVIDIA Tesla T4") == "t4"
    assert gpu_model_key("NVIDIA A100-SXM4-40GB") == "a100-sxm4-40gb"
    assert gpu_model_key("t4") == "t4"
    with pytest.raises(EnergyError):
        gpu_model_key("  ")
    with pytest.raises(EnergyError):
        gpu_model_key("v100/evil")


def test_power_lookup() -> None:
    assert power_for("Tesla T4") == BUILTIN_POWER["t4"]
    custom = PowerProfile(100, 50)
    assert power_for("Tesla T4", {"T4": custom}) == custom
    with pytest.raises(EnergyError, match="no power profile for GPU model 'h100'"):
        power_for("H100")


def test_config_keys() -> None:
    assert parse_config_key("Tesla T4:2") == ("t4", 2)
    assert parse_config_key("v100-pcie-32gb:1") == ("v100-pcie-32gb", 1)
    assert config_key(("t4", 2)) == "t4:2"
    for bad in ("t4", ":2", "t4:0", "t4:x", "t4:1.5"):
        with pytest.raises(ProfileError):
            parse_config_key(bad)


DOC = """
apiVersion: gputopo.io/v1
kind: JobProfiles
power:
  Tesla T4: {idle_w: 200, gpu_w: 70}
profiles:
  convnet:
    description: ConvNet
    epoch_time_s: {"v100-pcie-32gb:1": 14, "Tesla T4:1": 30.8}
"""


def test_profile_document() -> None:
    doc = load_profiles(DOC)
    p = doc.profile("convnet")
    assert p.time_per_epoch("Tesla V100-PCIE-32GB", 1) == 14.0
    assert p.time_per_epoch("t4", 1) == 30.8
    assert p.time_per_epoch("t4", 2) is None
    assert doc.power_profiles() == {"t4": PowerProfile(200.0, 70.0)}
    back = load_profiles(__import__("json").dumps(doc.to_json()))
    assert back == doc
    with pytest.raises(ProfileError, match="unknown profile 'resnet'; known: convnet"):
        doc.profile("resnet")


@pytest.mark.parametrize("text, message", [
    ("profiles: {a: {epoch_time_s: {'t4:1': -1}}}", "positive"),
    ("profiles: {a: {epoch_time_s: {'t4': 1}}}", "<gpu_model>:<gpus>"),
    ("profiles: {a: {epoch_time_s: {}}}", "at least one"),
    ("profiles: {a: {epoch_time_s: {'t4:1': 1}, extra: 1}}", "extra"),
    ("kind: Other\nprofiles: {}", "kind"),
    ("power: {t4: {idle_w: -5, gpu_w: 1}}", "power"),
    ("[1, 2]", "mapping"),
    ("profiles: {a: {epoch_time_s: {'t4:1': 1, 'Tesla T4:1': 2}}}", "twice"),
])
def test_bad_profile_documents(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        load_profiles(text)


def test_profile_file_errors(tmp_path: object) -> None:
    from pathlib import Path

    with pytest.raises(ProfileError, match="cannot read"):
        load_profiles(Path("/nonexistent/profiles.yaml"))
    bad = Path(str(tmp_path)) / "p.yaml"
    bad.write_text("profiles: [unclosed")
    with pytest.raises(ProfileError, match="not YAML/JSON"):
        load_profiles(bad)


# ------------------------------------------------------------------------------ learning


def test_estimate_epoch_time_from_reports() -> None:
    """Reports at the end of epochs 10, 11, 12 (the segment started at 100 s with 10 epochs
    done): 40 s per epoch, whatever the duplicate late reports say."""
    obs = [EpochObservation(100.0, 10), EpochObservation(140.0, 11),
           EpochObservation(180.0, 12), EpochObservation(200.0, 12)]
    assert estimate_epoch_time(obs) == pytest.approx(40.0)
    assert estimate_epoch_time([EpochObservation(5.0, 3)]) is None
    with pytest.raises(ProfileError, match="went down"):
        estimate_epoch_time([EpochObservation(0, 5), EpochObservation(10, 4)])


@given(st.floats(1, 500), st.floats(0, 1e5), st.integers(0, 50), st.integers(2, 40),
       st.lists(st.floats(0, 0.49), min_size=40, max_size=40))
def test_estimate_recovers_the_epoch_time(per: float, t0: float, e0: int, n: int,
                                          jitter: list[float]) -> None:
    """Reports within half an epoch of each epoch's end give an estimate within half an epoch
    per epoch-span of the truth."""
    obs = [EpochObservation(t0 + k * per + jitter[k] * per, e0 + k) for k in range(n)]
    est = estimate_epoch_time(obs)
    assert est is not None
    assert est == pytest.approx(per, rel=0.5 / max(1, n - 1) * 3 + 1e-9)


def test_learner_combines_measurements_with_the_document() -> None:
    declared = {("v100-pcie-32gb", 1): 40.0, ("v100-pcie-32gb", 2): 26.0, ("t4", 1): 100.0}
    learn = EpochTimeLearner()
    assert learn.epoch_times("effnet", declared) == declared
    learn.record("effnet", ("Tesla V100-PCIE-32GB", 1), 48.0, 10)  # 20 % slower than declared
    learn.record("effnet", ("v100-pcie-32gb", 1), 44.0, 30)
    times = learn.epoch_times("effnet", declared)
    assert times[("v100-pcie-32gb", 1)] == pytest.approx((48 * 10 + 44 * 30) / 40)  # 45
    # unmeasured configurations scale by the measured / declared ratio (45 / 40)
    assert times[("t4", 1)] == pytest.approx(100 * 45 / 40)
    assert times[("v100-pcie-32gb", 2)] == pytest.approx(26 * 45 / 40)
    # a profile known only from measurement
    assert learn.epoch_times("new") == {}
    assert learn.observe("new", ("t4", 1), [EpochObservation(0, 0),
                                            EpochObservation(30, 1)]) == 30.0
    assert learn.epoch_times("new") == {("t4", 1): 30.0}
    assert list(learn.keys()) == ["effnet", "new"]
    with pytest.raises(ProfileError):
        learn.record("x", ("t4", 1), 0.0, 1)


def test_remaining_epochs_restart_from_the_snapshot() -> None:
    assert remaining_epochs(160, 37) == 123
    assert remaining_epochs(10, 12) == 0
    with pytest.raises(ProfileError):
        remaining_epochs(-1, 0)


def test_node_energy_counts_idle_power_once_per_busy_node() -> None:
    """Two 1-GPU jobs overlapping for 1 h on one V100 node: 1 h at 750 W plus 1 h at 500 W
    (not 2 x 2 h at 500 W); a job alone on another node adds its own hours."""
    from topology.planning.energy import node_energy_eur

    p = PowerProfile(250.0, 250.0)
    price = EnergyPrice(pue=1.0, eur_per_kwh=1.0)
    runs = [("a", 1, 0.0, 7200.0), ("a", 1, 3600.0, 7200.0), ("b", 2, 0.0, 3600.0)]
    assert node_energy_eur(runs, {"a": p, "b": p}, price) == pytest.approx(
        0.5 + 0.75 + 0.75)
    assert node_energy_eur([], {}, price) == 0.0
    with pytest.raises(EnergyError):
        node_energy_eur([("c", 1, 0.0, 1.0)], {"a": p}, price)
    with pytest.raises(EnergyError):
        node_energy_eur([("a", 1, 5.0, 1.0)], {"a": p}, price)


def test_node_energy_skips_empty_intervals_and_no_gpu_intervals() -> None:
    """An interval of no length (a job started and stopped at one instant) or on no GPUs
    adds nothing and does not end the accounting: the intervals after it still count. A
    1-GPU job alone for 1 h on a V100 node at 1 EUR/kWh: 0.5 EUR, whatever else the list
    holds on that node (a negative GPU count does not lower the busy count)."""
    from topology.planning.energy import node_energy_eur

    p = PowerProfile(250.0, 250.0)
    price = EnergyPrice(pue=1.0, eur_per_kwh=1.0)
    runs = [("a", 1, 100.0, 100.0), ("a", 0, 0.0, 3600.0), ("a", -1, 0.0, 3600.0),
            ("a", 1, 0.0, 3600.0)]
    assert node_energy_eur(runs, {"a": p}, price) == pytest.approx(0.5)


def test_energy_errors_name_what_is_wrong() -> None:
    from topology.planning.energy import node_energy_eur

    p = PowerProfile(250.0, 250.0)
    with pytest.raises(EnergyError, match="busy GPU count must be >= 0, got -1"):
        p.watts(-1)
    with pytest.raises(EnergyError, match="no power profile for node 'c'"):
        node_energy_eur([("c", 1, 0.0, 1.0)], {"a": p}, EnergyPrice())
    with pytest.raises(EnergyError, match=r"interval on a ends \(1.0\) before it starts \(5.0\)"):
        node_energy_eur([("a", 1, 5.0, 1.0)], {"a": p}, EnergyPrice())
