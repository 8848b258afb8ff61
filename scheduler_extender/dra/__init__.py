"""gputopo's DRA allocator: ResourceClaims of gputopo's DeviceClasses get the node and GPU set
the extender's placement policies choose (docs/dra.md).

* :mod:`~scheduler_extender.dra.claims` (pure): what a pod's claims ask of gputopo, and the
  ``status.allocation`` that grants a decision;
* :mod:`~scheduler_extender.dra.state`: the cluster as the allocator sees it (node topologies,
  healthy devices from the ResourceSlices, held GPUs from every allocated claim);
* :mod:`~scheduler_extender.dra.allocator`: the controller (pods with gputopo claims →
  :class:`~scheduler_extender.decision.Decider` → claim status, then the pod's scheduling gate);
* :mod:`~scheduler_extender.dra.kube`: its Kubernetes API calls;
* :mod:`~scheduler_extender.dra.service`: the process (leader election, probes, metrics).
"""
