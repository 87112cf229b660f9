"""GPU Portal's admission engine: a snapshot of the cluster and its policy in, a plan out.

Pure Python: nothing here imports Django or the Kubernetes client. See docs/admission.md.
"""

from queues.admission.capability import (
    CapabilityRequest,
    GpuClassSpec,
    Resolution,
    mig_profile_memory_gb,
    parse_share,
    resolve_capability,
)
from queues.admission.engine import plan
from queues.admission.explain import Acceptable, Alternative, Explanation, explain, keeps_the_ask
from queues.admission.plan import (
    Admission,
    EstimatedStart,
    PendingStatus,
    Plan,
    Preemption,
    ScaleUp,
    bound_kept,
    gpu_eq_json,
)
from queues.admission.probes import PROBE_USER, default_probe
from queues.admission.reasons import PendingReason, ReasonCode
from queues.admission.snapshot import (
    NO_HISTORY,
    CapacityKind,
    Forecast,
    GpuClass,
    MaintenanceState,
    MigSlots,
    Node,
    NodePool,
    PendingJob,
    PlannedNodes,
    PreemptionClass,
    Queue,
    Quota,
    Reservation,
    RunningJob,
    SharingMode,
    Snapshot,
    Team,
    TopologyScope,
)

__all__ = [
    "NO_HISTORY",
    "PROBE_USER",
    "Acceptable",
    "Admission",
    "Alternative",
    "CapabilityRequest",
    "CapacityKind",
    "EstimatedStart",
    "Explanation",
    "Forecast",
    "GpuClass",
    "GpuClassSpec",
    "MaintenanceState",
    "MigSlots",
    "Node",
    "NodePool",
    "PendingJob",
    "PendingReason",
    "PendingStatus",
    "Plan",
    "PlannedNodes",
    "Preemption",
    "PreemptionClass",
    "Queue",
    "Quota",
    "ReasonCode",
    "Reservation",
    "Resolution",
    "RunningJob",
    "ScaleUp",
    "SharingMode",
    "Snapshot",
    "Team",
    "TopologyScope",
    "bound_kept",
    "default_probe",
    "explain",
    "gpu_eq_json",
    "keeps_the_ask",
    "mig_profile_memory_gb",
    "parse_share",
    "plan",
    "resolve_capability",
]
