"""The kubelet's gRPC APIs, generated from the upstream protos (see :mod:`.generate`).

* :mod:`device_plugin.api.api_pb2` / :mod:`~device_plugin.api.api_pb2_grpc`: device plugin API
  ``v1beta1`` (``Registration``, ``DevicePlugin``).
* :mod:`device_plugin.api.podresources_pb2` / :mod:`~device_plugin.api.podresources_pb2_grpc`:
  pod-resources API ``v1`` (``PodResourcesLister``).
"""

#: The device-plugin API version this plugin speaks (``v1beta1.Version`` upstream).
VERSION = "v1beta1"
#: ``Device.health`` values (upstream ``constants.go``).
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
#: The kubelet's registration socket, a file in the device-plugin directory.
KUBELET_SOCKET = "kubelet.sock"
#: Default device-plugin directory (``v1beta1.DevicePluginPath``).
DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"
#: Default pod-resources socket of the kubelet.
DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
