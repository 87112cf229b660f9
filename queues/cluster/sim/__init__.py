"""The simulated cluster: a small Kubernetes API server with simulated GPU nodes.

It speaks the subset of the Kubernetes REST API the portal's adapter uses, through the official
client and a kubeconfig, schedules pods the way kube-scheduler filters nodes, runs them for a
simulated duration and can inject faults. No Django here: it runs standalone
(``python -m queues.cluster.sim --nodes examples/cluster.yaml``), from
``manage.py simcluster`` and inside tests. See docs/simulated-cluster.md.
"""

from queues.cluster.sim.clock import Clock, ManualClock, WallClock
from queues.cluster.sim.cluster import GPU_HEALTH_CONDITION, GPU_HEALTH_LABEL, SimCluster
from queues.cluster.sim.errors import ApiError
from queues.cluster.sim.faults import RequestFault
from queues.cluster.sim.kubeconfig import write_kubeconfig
from queues.cluster.sim.kubelet import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION, OOM_ANNOTATION
from queues.cluster.sim.nodes import ClusterSpec, NodeFileError, load_cluster_file, parse_cluster
from queues.cluster.sim.server import SimServer, inject_fault

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
