"""NodePrepareResources' logic with generated bad input: allocated ResourceClaims with one
part of their allocation replaced by any JSON value or removed, prepared one after another
on one node. ``prepare`` never raises; a claim it cannot prepare gets a one-line reason and
leaves no CDI spec; a whole GPU is never prepared for two claims; a good claim beside them
is prepared as usual. (The hand-picked refusals are in ``test_dra_prepare.py``.)"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.cdi import spec_path
from tests.damage import damaged
from tests.dra_driver.helpers import claim, write_claims
from tests.dra_driver.test_dra_prepare import NODE, _preparer
from topology.dra import DeviceKind

GOOD = [claim("ring", NODE, [0, 1, 2, 3], uid="uid-ring"),
        claim("pair", NODE, [4, 5], uid="uid-pair"),
        claim("share", NODE, [6], uid="uid-share", kind=DeviceKind.SHARE, core=30, mem=4096)]


def _status_damaged(c: dict[str, Any]) -> Any:
    """The claim with its status (where the allocation is) damaged: the API server
    validates the spec, and the status is what an allocator wrote."""
    return st.builds(lambda status: {**c, "status": status}, damaged(c["status"], whole=10))


@settings(max_examples=150, deadline=None)
@given(bad=st.lists(st.sampled_from(GOOD).flatmap(_status_damaged), min_size=1, max_size=3))
def test_damaged_allocations_are_refused_in_one_line_and_never_share_a_gpu(
        bad: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        named = [{**c, "metadata": {**c["metadata"], "name": f"bad-{i}",
                                    "uid": f"uid-bad-{i}"}} for i, c in enumerate(bad)]
        good = claim("good", NODE, [7], uid="uid-good")
        write_claims(tmp / "claims.json", [*named, good])
        p = _preparer(tmp)
        whole: list[int] = []  # GPUs prepared whole, once per claim that got them
        views: list[int] = []  # GPUs a share or slot was prepared on
        for c in named:
            uid = c["metadata"]["uid"]
            r = p.prepare(uid, "default", c["metadata"]["name"])
            if r.error:
                assert "\n" not in r.error and r.devices == ()
                assert not spec_path(tmp / "cdi", uid).exists()
                continue
            for dev in r.devices:  # gpu-<index>, or gpu-<index>-share / -slot
                index = int(dev.device.split("-")[1])
                (whole if dev.device == f"gpu-{index}" else views).append(index)
        taken = whole
        # a GPU prepared whole is prepared for no other claim, whole or shared
        assert len(whole) == len(set(whole)) and not set(whole) & set(views), (whole, views)
        r = p.prepare("uid-good", "default", "good")
        if 7 in taken:  # a damaged claim took it first: refused, never shared
            assert r.error
        else:
            assert r.error == "" and [d.device for d in r.devices] == ["gpu-7"]
