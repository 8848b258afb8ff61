"""What both node programs share: the device plugin (``device_plugin/``) and the DRA driver
(``dra_driver/``) run on the same GPU nodes and must agree on what a node is and what a
container gets, so each piece is here once:

* :mod:`gpunode.health` — GPU health from NVML (critical XIDs, failed queries, recovery);
* :mod:`gpunode.container` — the container's environment, device nodes and mounts for its
  GPUs (``CUDA_VISIBLE_DEVICES``, CPU affinity, MPS limits), and the device minor numbers;
* :mod:`gpunode.publish` — the Node's topology annotation and labels, and the loop that
  keeps them current;
* :mod:`gpunode.kube` — the Kubernetes client from a kubeconfig or the service account;
* :mod:`gpunode.grpcserver` — a restartable gRPC server on a unix socket (the kubelet-facing
  sockets);
* :mod:`gpunode.settings` — the settings checks and resolution both share;
* :mod:`gpunode.signals` — running until SIGTERM/SIGINT;
* :mod:`gpunode.protogen` — vendoring and generating the kubelet's protos.

Neither program imports the other (import-linter ``programs-independent``); both import this.
"""
