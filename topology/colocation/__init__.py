"""Interference-aware co-location of training jobs on one GPU (Tabrizian, U. Toronto 2020).

* :mod:`topology.colocation.profile` — job profiles (solo iteration time, C of Eq. 4.3, M of
  Eq. 4.2, GPU memory) and the profile catalogs (shipped, or the user's own file/ConfigMap);
* :mod:`topology.colocation.model` — each job's slow-down in a co-located set and δ (Eq. 4.1);
* :mod:`topology.colocation.sources` — where a pod's profile comes from (annotations, catalog,
  measurements, the conservative default);
* :mod:`topology.colocation.dcgm` — measured profiles from dcgm-exporter's exposition text;
* :mod:`topology.colocation.derivation` — how the shipped catalogs were derived.

Pure: no Kubernetes, HTTP or gRPC.
"""
