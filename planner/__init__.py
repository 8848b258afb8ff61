"""``gputopo planner``: deadline- and energy-aware planning of batch/v1 Jobs (ANDREAS).

* :mod:`planner.jobs` — managed Jobs as data, the patches that resume and suspend them (pure);
* :mod:`planner.cluster` — GPU nodes, held GPUs, run intervals and the energy ledger (pure);
* :mod:`planner.controller` — one rescheduling point: read, plan, act;
* :mod:`planner.kube` — the Kubernetes API (the only module that talks to it);
* :mod:`planner.service` — the Job watch, leader election, metrics server;
* :mod:`planner.settings`, :mod:`planner.metrics`.

The algorithm is :mod:`topology.planning` (pure, shared with the simulator).
"""
