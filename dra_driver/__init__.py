"""gputopo's DRA driver for ``gpu.gputopo.io`` (``gputopo dra-driver``): ResourceSlices for
the node's GPUs, the kubelet plugin (registration, ``NodePrepareResources`` writing CDI
specs, a checkpoint). The contract it publishes is :mod:`topology.dra`; what it shares with
the device plugin is :mod:`gpunode`.
"""
