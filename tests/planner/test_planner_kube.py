"""The planner's API client (``planner.kube.KubeClient``) against an API server that does not
answer: every call fails as an :class:`ApiError` with status 0 ("no reply") — the controller
logs it in one line and tries again at the next rescheduling point — not as urllib3's own
exceptions, which reached the logs as tracebacks; an Event, best effort, is only logged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from planner.kube import ApiError, KubeClient
from tests.kubeconfigs import unreachable_kubeconfig


@pytest.fixture
def client(tmp_path: Path) -> KubeClient:
    kubeconfig = unreachable_kubeconfig(tmp_path)
    return KubeClient(kubeconfig)


@pytest.mark.parametrize(("call", "what"), [
    (lambda c: c.list_nodes(), "list failed"),
    (lambda c: c.list_jobs(), "list failed"),
    (lambda c: next(iter(c.watch_pods("1", 5))), "watch failed"),
    (lambda c: c.read_configmap("ns", "profiles"), "read configmap ns/profiles"),
    (lambda c: c.patch_job("ns", "j", [{"op": "replace", "path": "/spec/suspend",
                                        "value": False}]), "patch job ns/j"),
], ids=["list-nodes", "list-jobs", "watch-pods", "read-configmap", "patch-job"])
def test_no_reply_is_an_api_error_with_status_0(client: KubeClient, call: object,
                                                what: str) -> None:
    with pytest.raises(ApiError) as info:
        call(client)  # type: ignore[operator]
    assert info.value.status == 0
    assert str(info.value).startswith(f"{what}: no reply from the API server: ")
    assert "\n" not in str(info.value)


def test_an_event_that_cannot_be_sent_is_logged(client: KubeClient,
                                                caplog: pytest.LogCaptureFixture) -> None:
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}}
    with caplog.at_level(logging.WARNING, logger="gputopo.planner"):
        client.event(job, "Planned", "on node n0")
    assert "event Planned on ns/j not recorded: event: no reply from the API server" in \
        caplog.text
