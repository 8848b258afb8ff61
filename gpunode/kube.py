"""The Kubernetes API client both node programs use: from a kubeconfig file, else from the
pod's service account (in-cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class KubeConfigError(RuntimeError):
    """No usable Kubernetes configuration; the message is one line."""


def api_client(kubeconfig: Path | None) -> Any:
    """A ``kubernetes.client.ApiClient`` from ``kubeconfig``, or from the in-cluster service
    account when None.

    Raises:
        KubeConfigError: the file or the in-cluster configuration is unusable.
    """
    import yaml  # what load_kube_config parses with
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if kubeconfig is not None:
            config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        else:
            config.load_incluster_config(client_configuration=cfg)
    except (ConfigException, OSError, TypeError, ValueError, AttributeError, LookupError,
            yaml.YAMLError) as exc:  # a file that is not a kubeconfig: each of these
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config (no --kubeconfig)"
        raise KubeConfigError(f"cannot load {where}: {' '.join(str(exc).split())}") from None
    return client.ApiClient(cfg)


def core_api(kubeconfig: Path | None) -> Any:
    """A ``CoreV1Api`` (:func:`api_client`).

    Raises:
        KubeConfigError: no usable configuration.
    """
    from kubernetes import client

    return client.CoreV1Api(api_client(kubeconfig))
