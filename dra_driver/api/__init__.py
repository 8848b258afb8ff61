"""The kubelet's gRPC APIs the DRA driver speaks, generated from the upstream protos of
``k8s.io/kubelet@v0.36.3`` (see :mod:`.generate`).

* :mod:`dra_driver.api.dra_v1_pb2` / ``_grpc``: ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``;
* :mod:`dra_driver.api.dra_v1beta1_pb2` / ``_grpc``: the same service in ``v1beta1``;
* :mod:`dra_driver.api.pluginregistration_pb2` / ``_grpc``: ``pluginregistration.Registration``.
"""

#: The plugin type the kubelet's plugin watcher routes to its DRA manager
#: (``pluginregistration/v1/constants.go``).
DRA_PLUGIN_TYPE = "DRAPlugin"
#: The gRPC services advertised in ``PluginInfo.supported_versions``, newest first: the kubelet
#: picks the first it supports (``validateSupportedServices`` in 1.36).
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
#: The kubelet's plugin-registration directory (its plugin watcher watches it).
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
#: Where a DRA plugin keeps its sockets and data (``kubeletplugin.KubeletPluginsDir``).
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
