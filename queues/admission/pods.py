"""A pod's size: its defaults, the devices it asks for and their GPU-equivalents, and what a
node holds of it. The one home of these rules; the engine (asks.py) and submission
(``queues/jobs/requests.py``) both read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from queues.admission.state import EXCLUSIVE, MIG, TIME_SLICED

# A pod's CPU and memory when a submission names none: the one default of the API, the submit
# form and the request rules (a pending job always carries the size it was submitted with).
DEFAULT_POD_CPU_MILLICORES = 1000
DEFAULT_POD_MEMORY_MIB = 4096

UNIT_WORDS = {EXCLUSIVE: "GPU", MIG: "slice", TIME_SLICED: "replica"}


def request_mode(*, time_sliced_queue: bool, mig_profile: str | None) -> str:
    """The kind of device a job asks for: MIG slices when its capability class names a
    profile; otherwise time-slice replicas on a time-sliced queue, whole GPUs on any other."""
    if mig_profile:
        return MIG
    return TIME_SLICED if time_sliced_queue else EXCLUSIVE


def node_devices(
    mode: str,
    profile: str | None,
    *,
    gpus: int,
    mig_layout: Mapping[str, int],
    time_slice_replicas: int,
) -> int | None:
    """How many devices of ``mode`` (and MIG ``profile``) a node offers when it is empty; None
    when the node serves another kind (a node cut into MIG slices serves only MIG requests, one
    with time-slice replicas only time-sliced ones)."""
    if mig_layout:
        return mig_layout.get(profile or "") if mode == MIG else None
    if mode == MIG:
        return None
    if time_slice_replicas > 1:
        return gpus * time_slice_replicas if mode == TIME_SLICED else None
    return gpus if mode == EXCLUSIVE else None


def pod_gpu_eq(
    mode: str, *, gpus_per_pod: int, mig_share: Fraction, least_replicas: int
) -> Fraction:
    """GPU-equivalents one pod holds: its slices' share of a GPU, its time-slice replicas at the
    most a node of the class could charge (its fewest replicas, so quota checks stay safe), or
    its whole GPUs."""
    if mode == MIG:
        return mig_share * gpus_per_pod
    if mode == TIME_SLICED:
        return Fraction(gpus_per_pod, least_replicas)
    return Fraction(gpus_per_pod)


def fits_empty_nodes(devices: Sequence[int], *, pods: int, devices_per_pod: int) -> bool:
    """Whether ``pods`` pods of ``devices_per_pod`` devices each fit nodes offering ``devices``
    when every node is empty (no topology, taint or CPU limit: those the engine judges)."""
    return sum(d // devices_per_pod for d in devices) >= pods


def pods_held(cpu: int, memory: int, pod_cpu: int, pod_memory: int, most: int) -> int:
    """How many pods of ``pod_cpu`` millicores and ``pod_memory`` MiB a node allocating ``cpu``
    and ``memory`` holds, at most ``most`` (a size the node does not report, 0, is no limit; nor
    is a pod's 0)."""
    if cpu and pod_cpu:
        most = min(most, cpu // pod_cpu)
    if memory and pod_memory:
        most = min(most, memory // pod_memory)
    return most


@dataclass(frozen=True, slots=True)
class NodeSize:
    """What a node allocates to pods, as the cluster last reported it (0: it did not say)."""

    cpu_millicores: int
    memory_mib: int


def pod_size_problems(
    *, queue: str, cpu_millicores: int, memory_mib: int, sizes: Sequence[NodeSize]
) -> dict[str, list[str]]:
    """What is wrong, by request field, with a pod no node of ``queue`` could hold. The engine
    plans GPUs; CPU and memory only the cluster's scheduler places, and it would leave such a pod
    unschedulable. Nothing is refused while a node's size is unknown (no node mirrored yet, or
    one not saying)."""
    if not sizes or any(not s.cpu_millicores or not s.memory_mib for s in sizes):
        return {}
    cpu, memory = cpu_millicores, memory_mib
    problems: dict[str, list[str]] = {}
    most_cpu = max(s.cpu_millicores for s in sizes)
    most_memory = max(s.memory_mib for s in sizes)
    if cpu > most_cpu:
        problems["cpu_millicores_per_pod"] = [
            f"{cpu / 1000:g} CPU cores per pod is more than any node of queue {queue} can give a "
            f"pod (the largest has {most_cpu / 1000:g} CPU cores allocatable)"
        ]
    if memory > most_memory:
        problems["memory_mib_per_pod"] = [
            f"{memory:,} MiB per pod is more than any node of queue {queue} can give a pod "
            f"(the largest has {most_memory:,} MiB allocatable)"
        ]
    if not problems and not any(
        pods_held(s.cpu_millicores, s.memory_mib, cpu, memory, 1) for s in sizes
    ):
        problems["cpu_millicores_per_pod"] = [
            f"no node of queue {queue} has both {cpu / 1000:g} CPU cores and {memory:,} MiB "
            "allocatable for one pod: ask for less of one"
        ]
    return problems
