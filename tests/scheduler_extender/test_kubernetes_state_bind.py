"""KubernetesState.bind's error path, driven by hand: which failures read the pod back,
what the read-back must show to prove the Binding written, and what the caller is told
(``BindError.maybe_written``). (docs/testing.md, "Ninth round".)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from scheduler_extender.kubernetes_state import ApiError, KubernetesState
from scheduler_extender.state import BindError, PodRef
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.kube_state_helpers import decision_on, running, two_dgx1
from topology.contract import assignment_annotations

fake = pytest.fixture(two_dgx1, name="fake")  # two idle DGX-1 V100 nodes, n0 and n1
kube = pytest.fixture(running, name="kube")  # listed; the test applies every event


def refuse_after_writing(fake: FakeKubeAPI, status: int) -> None:
    """The next Binding is written, then its call fails with ``status`` (a reply lost, or a
    5xx from a server that wrote it anyway)."""

    def fail() -> None:
        fake.after_binding = None
        raise ApiError(f"{status} the reply went astray", status)

    fake.after_binding = fail


@pytest.mark.parametrize("status", [0, 500, 503])
def test_a_written_binding_whose_call_failed_is_bound(
    fake: FakeKubeAPI, kube: KubernetesState, status: int
) -> None:
    """No reply, or a 5xx (500 included): the Binding may have been written, so the pod is
    read back, and bound there with its decision it is bound."""
    fake.add_pod("p", "u-p")
    refuse_after_writing(fake, status)
    kube.bind(PodRef("default", "p", "u-p"), "n1", decision_on((4, 5)))
    assert fake.pods["u-p"]["spec"]["nodeName"] == "n1"


@pytest.mark.parametrize("status", [404, 409, 422, 499])
def test_a_4xx_is_a_refusal_and_reads_nothing_back(
    fake: FakeKubeAPI, kube: KubernetesState, status: int
) -> None:
    """A 4xx means the API server refused the Binding and wrote nothing: no read-back, and
    the outcome is known (the caller may free the GPUs)."""
    fake.add_pod("p", "u-p")
    fake.fail_binding, fake.fail_binding_status = f"{status} refused", status
    reads: list[str] = []
    real_get = fake.get_pod

    def get_pod(namespace: str, name: str) -> dict[str, Any] | None:
        reads.append(name)
        return real_get(namespace, name)

    fake.get_pod = get_pod  # type: ignore[method-assign]
    with pytest.raises(BindError) as info:
        kube.bind(PodRef("default", "p", "u-p"), "n1", decision_on((4, 5)))
    assert str(info.value) == f"cannot bind pod default/p to n1: {status} refused"
    assert not info.value.maybe_written and reads == []


def no_reply_after(fake: FakeKubeAPI, change: Callable[[dict[str, Any]], object]) -> None:
    """The next Binding is not written; its call fails without a reply after ``change`` was
    made to the pod (what the read-back then finds)."""
    real = fake.create_binding

    def create_binding(namespace: str, name: str, uid: str, node: str,
                       annotations: Mapping[str, str]) -> None:
        fake.create_binding = real  # type: ignore[method-assign]
        pod = fake._by_name(namespace, name)
        assert pod is not None
        change(pod)
        raise ApiError("no reply from the API server: connection reset", 0)

    fake.create_binding = create_binding  # type: ignore[method-assign]


def elsewhere(pod: dict[str, Any]) -> None:
    pod["spec"]["nodeName"] = "n0"
    pod["metadata"]["annotations"] = assignment_annotations(decision_on((4, 5)), "n1")


def replaced(pod: dict[str, Any]) -> None:
    pod["metadata"]["uid"] = "u-p2"
    pod["spec"]["nodeName"] = "n1"
    pod["metadata"]["annotations"] = assignment_annotations(decision_on((4, 5)), "n1")


def other_gpus(pod: dict[str, Any]) -> None:
    pod["spec"]["nodeName"] = "n1"
    pod["metadata"]["annotations"] = assignment_annotations(decision_on((6, 7)), "n1")


def part_of_ours(pod: dict[str, Any]) -> None:
    ours = assignment_annotations(decision_on((4, 5)), "n1")
    pod["spec"]["nodeName"] = "n1"
    pod["metadata"]["annotations"] = dict(list(ours.items())[:1])


def unannotated(pod: dict[str, Any]) -> None:
    pod["spec"]["nodeName"] = "n1"


@pytest.mark.parametrize("change", [elsewhere, replaced, other_gpus, part_of_ours, unannotated])
def test_a_read_back_that_is_not_our_binding_fails_the_bind(
    fake: FakeKubeAPI, kube: KubernetesState, change: Callable[[dict[str, Any]], None]
) -> None:
    """The read-back after a lost reply proves the bind only when the pod is ours (its UID),
    on our node, with every annotation of our decision: bound elsewhere, a new pod under the
    name, other GPUs, part of the annotations, none (another scheduler's bind) — each is a
    failed bind whose outcome is known."""
    fake.add_pod("p", "u-p")
    no_reply_after(fake, change)
    with pytest.raises(BindError) as info:
        kube.bind(PodRef("default", "p", "u-p"), "n1", decision_on((4, 5)))
    assert str(info.value) == ("cannot bind pod default/p to n1: no reply from the API "
                               "server: connection reset")
    assert not info.value.maybe_written


def test_a_read_back_of_a_deleted_pod_fails_the_bind(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    fake.add_pod("p", "u-p")
    no_reply_after(fake, lambda pod: fake.pods.pop("u-p"))
    with pytest.raises(BindError) as info:
        kube.bind(PodRef("default", "p", "u-p"), "n1", decision_on((4, 5)))
    assert not info.value.maybe_written


def test_a_read_back_proves_a_bind_without_uid_or_decision(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A bind that names no UID accepts the pod of that name; a pod without gputopo
    resources (no decision, no annotations) is proven bound by its node alone."""
    fake.add_pod("p", "u-p")
    ours = assignment_annotations(decision_on((4, 5)), "n1")
    no_reply_after(fake, lambda pod: (pod["spec"].update(nodeName="n1"),
                                      pod["metadata"]["annotations"].update(ours)))
    kube.bind(PodRef("default", "p"), "n1", decision_on((4, 5)))
    fake.add_pod("plain", "u-plain", gpus=0)
    no_reply_after(fake, unannotated)
    kube.bind(PodRef("default", "plain", "u-plain"), "n1", None)


def test_a_read_back_that_fails_leaves_the_outcome_unknown(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    fake.add_pod("p", "u-p")
    fake.fail_binding, fake.fail_binding_status = "502 Bad Gateway", 502

    def unreachable(namespace: str, name: str) -> dict[str, Any] | None:
        raise RuntimeError("connection refused")

    fake.get_pod = unreachable  # type: ignore[method-assign]
    with pytest.raises(BindError) as info:
        kube.bind(PodRef("default", "p", "u-p"), "n1", decision_on((4, 5)))
    assert info.value.maybe_written
    assert str(info.value) == (
        "cannot bind pod default/p to n1: 502 Bad Gateway; reading it back failed too "
        "(connection refused): its GPUs stay reserved until the watch shows the outcome")


def test_the_binding_carries_the_uid_precondition(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A pod replaced under its name between filter and bind: the Binding names the UID
    kube-scheduler decided for, so the API refuses it and the new pod stays unbound."""
    fake.add_pod("p", "u-new")
    with pytest.raises(BindError):
        kube.bind(PodRef("default", "p", "u-old"), "n1", decision_on((4, 5)))
    assert fake.pods["u-new"]["spec"]["nodeName"] == ""
