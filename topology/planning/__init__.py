"""Deadline- and energy-aware job planning: when, where (node) and on how many GPUs each job
runs (ANDREAS, Filippini et al.). Pure: no Kubernetes, no clock, no I/O outside the profile
loader.

* :mod:`topology.planning.energy` — c_ng from power profiles, PUE and price (§V-A);
* :mod:`topology.planning.profiles` — per-epoch times by configuration, the profile document,
  learning from reported epochs (§III);
* :mod:`topology.planning.andreas` — f_OBJ (Eq. 1), pressure (Eq. 2), Algorithm 1;
* :mod:`topology.planning.baselines` — FIFO, EDF and Priority Scheduling (§V-B's comparison).
"""
