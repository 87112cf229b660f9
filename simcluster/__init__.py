"""The simulated cluster: a small Kubernetes API server with simulated GPU nodes.

It speaks the subset of the Kubernetes REST API the portal's adapter uses, through the official
client and a kubeconfig, schedules pods the way kube-scheduler filters nodes, runs them for a
simulated duration and can inject faults. A development and test tool, not part of the
deployed product: no Django here, and the portal never imports it. It runs standalone
(``python -m simcluster --nodes examples/cluster.yaml``), under ``make demo`` and inside tests.
See docs/simulated-cluster.md.
"""

from simcluster.clock import Clock, ManualClock, WallClock
from simcluster.cluster import GPU_HEALTH_CONDITION, GPU_HEALTH_LABEL, SimCluster
from simcluster.errors import ApiError
from simcluster.faults import RequestFault
from simcluster.kubeconfig import write_kubeconfig
from simcluster.kubelet import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION, OOM_ANNOTATION
from simcluster.nodes import ClusterSpec, NodeFileError, load_cluster_file, parse_cluster
from simcluster.server import SimServer, inject_fault

__all__ = [
    "DURATION_ANNOTATION",
    "EXIT_CODE_ANNOTATION",
    "GPU_HEALTH_CONDITION",
    "GPU_HEALTH_LABEL",
    "OOM_ANNOTATION",
    "ApiError",
    "Clock",
    "ClusterSpec",
    "ManualClock",
    "NodeFileError",
    "RequestFault",
    "SimCluster",
    "SimServer",
    "WallClock",
    "inject_fault",
    "load_cluster_file",
    "parse_cluster",
    "write_kubeconfig",
]
