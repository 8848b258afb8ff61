"""The one registry of placement policies, resolved at start-up.

Each policy module registers its function with :func:`register`. :func:`get_policy` resolves
a name (raising :class:`UnknownPolicy` naming the known ones), so an extender started with an
unknown ``--policy`` fails at boot, not on the first pod.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from topology.policies.base import PolicyFn, Request

#: Modules that register policies when imported (order = listing order).
POLICY_MODULES = (
    "topology.policies.baseline",
    "topology.policies.gaia",
    "topology.policies.mapa",
    "topology.policies.default",
    "topology.policies.nvidia",
    "topology.policies.amaral",
    "topology.policies.colocate",
    "topology.policies.dra_first_fit",
)

DEFAULT_POLICY = "gputopo"


class UnknownPolicy(KeyError):
    """No policy has this name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown policy"


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy: its name, the function, and one line on what it does.

    Attributes:
        free_set_only: for whole-GPU requests the policy reads the node state only through
            its free GPUs (``NodeState.free_gpus``): how the busy GPUs are used (whole,
            shared, unhealthy) does not change the decision. Decisions are then cached per
            free-GPU mask rather than per full state (:func:`topology.policies.evaluate.place`)
            — a property test holds every policy declaring it to that.
        colocation: the policy places co-location slots (``Request.shared``,
            ``gputopo.io/gpu-shared``); others refuse such requests.
        utility_scored: the policy ranks placements by Amaral's utility (Eq. 2), so node
            scores of its whole-GPU decisions rank by that utility too
            (:mod:`topology.policies.scoring`) rather than by predicted EffBW.
        lookahead: the policy reads ``Request.upcoming`` (the jobs waiting behind this one);
            runners fill it in only for such policies, so the others keep their cache hits.
    """

    name: str
    fn: PolicyFn
    summary: str
    free_set_only: bool = False
    colocation: bool = False
    utility_scored: bool = False
    lookahead: bool = False

    def keys_by_free_mask(self, request: Request) -> bool:
        """``request``'s decisions depend on a node's state only through its free-GPU mask
        (a whole-GPU request to a ``free_set_only`` policy): caches and node groups may key
        by that mask."""
        return self.free_set_only and not request.fractional and request.shared is None


_REGISTRY: dict[str, PolicySpec] = {}
_loaded = False


def register(
    name: str, summary: str, *, free_set_only: bool = False, colocation: bool = False,
    utility_scored: bool = False, lookahead: bool = False,
) -> Callable[[PolicyFn], PolicyFn]:
    """Decorator: register ``fn`` under ``name`` (``free_set_only``, ``colocation``,
    ``utility_scored``, ``lookahead``: see :class:`PolicySpec`).

    Raises:
        ValueError: the name is already taken by another function.
    """

    def deco(fn: PolicyFn) -> PolicyFn:
        old = _REGISTRY.get(name)
        if old is not None and old.fn is not fn and old.fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"policy {name!r} registered twice")
        _REGISTRY[name] = PolicySpec(name, fn, summary, free_set_only, colocation,
                                     utility_scored, lookahead)
        return fn

    return deco


def _load() -> None:
    global _loaded
    if _loaded:
        return
    for mod in POLICY_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise
    _loaded = True


def policies() -> dict[str, PolicySpec]:
    """All registered policies by name."""
    _load()
    return dict(_REGISTRY)


def colocation_policies() -> list[str]:
    """Names of the policies that place co-location slots (``PolicySpec.colocation``)."""
    return sorted(n for n, spec in policies().items() if spec.colocation)


def get_policy(name: str) -> PolicySpec:
    """Resolve a policy by name.

    Raises:
        UnknownPolicy: no such policy; the message lists the known names.
    """
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise UnknownPolicy(f"unknown policy {name!r}; known policies: {known}") from None
