"""A job request and every rule on it: the one place the form, the API, the batch endpoint and
the preview check a request."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db.models import Exists, Q

from portal.formatting import display, format_duration
from queues.admission.asks import pods_held
from queues.models import (
    CapabilityClass,
    Node,
    Queue,
    Team,
)


@dataclass(frozen=True)
class JobRequest:
    """A submission as the form or the API gives it, before it is accepted."""

    owner: Any
    team: Team
    queue: Queue
    capability_class: CapabilityClass
    image: str
    command: list[str]
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    pods: int = 1
    gpus_per_pod: int = 1
    runtime_limit: timedelta | None = None
    priority: int | None = None
    checkpoint_interval: timedelta | None = None
    declared_gpu_memory_gb: int | None = None
    cpu_millicores_per_pod: int = 1000
    memory_mib_per_pod: int = 4096
    name: str = ""

    @property
    def runtime(self) -> timedelta:
        return self.runtime_limit or self.queue.default_runtime

    @property
    def job_priority(self) -> int:
        return self.queue.default_job_priority if self.priority is None else self.priority

    @property
    def gpu_equivalents(self) -> Fraction:
        return (
            self.pods
            * self.gpus_per_pod
            * capability_class_share(self.capability_class, self.queue)
        )


def job_request_errors(
    request: JobRequest, *, cache: dict[tuple, Any] | None = None
) -> dict[str, list[str]]:
    """Every way ``request`` breaks its queue's terms, by field (empty: it keeps them).
    ``cache`` remembers what was read for the requests of one batch (memberships, node sizes)."""
    errors: dict[str, list[str]] = {}
    team, queue, capability_class = request.team, request.queue, request.capability_class
    cache = {} if cache is None else cache

    def refuse(field_name: str, message: str) -> None:
        errors.setdefault(field_name, []).append(message)

    key = (request.owner.pk, team.pk, queue.pk, capability_class.pk)
    if key not in cache:
        cache[key] = _memberships(request)
    member, team_allowed, class_allowed = cache[key]
    if not member:
        refuse("team", f"you are not a member of team {team.name}")
    if not queue.active or not team_allowed:
        refuse("queue", f"team {team.name} may not submit to queue {queue.name}")
    if not class_allowed:
        allowed = ", ".join(queue.allowed_capability_classes.values_list("name", flat=True))
        refuse(
            "capability_class",
            f"queue {queue.name} does not allow capability class {capability_class.name} "
            f"(allowed: {allowed})",
        )
    if capability_class.mig_profile and queue.sharing_mode != "mig":
        refuse(
            "capability_class",
            f"{capability_class.name} asks for a MIG slice, but queue {queue.name} hands out "
            f"{queue.get_sharing_mode_display()}",
        )
    if request.runtime > queue.max_runtime:
        refuse(
            "runtime_limit",
            f"{format_duration(request.runtime)} is over queue {queue.name}'s maximum of "
            f"{format_duration(queue.max_runtime)}",
        )
    if request.pods < 1:
        refuse("pods", "must be at least 1")
    if request.gpus_per_pod < 1:
        refuse("gpus_per_pod", "must be at least 1")
    if request.gpu_equivalents > Fraction(str(queue.max_gpus_per_job)):
        refuse(
            "gpus_per_pod",
            f"{request.pods} pod(s) × {request.gpus_per_pod} = "
            f"{_fraction_text(request.gpu_equivalents)} GPU-equivalents is over "
            f"queue {queue.name}'s maximum of {display(queue.max_gpus_per_job)} per job",
        )
    if not queue.min_job_priority <= request.job_priority <= queue.max_job_priority:
        refuse(
            "priority",
            f"must be from {queue.min_job_priority} to {queue.max_job_priority} "
            f"in queue {queue.name}",
        )
    if queue.sharing_mode == "time-sliced" and request.declared_gpu_memory_gb is None:
        refuse(
            "declared_gpu_memory_gb",
            "time-sliced GPUs share their memory: declare how much your job uses",
        )
    if ("node sizes", queue.pk) not in cache:
        cache["node sizes", queue.pk] = node_sizes(queue)
    for field_name, message in pod_size_problems(request, cache["node sizes", queue.pk]):
        refuse(field_name, message)
    if not request.image.strip():
        refuse("image", "required")
    elif not image_allowed(request.image.strip()):
        refuse(
            "image",
            f"{request.image.strip()} is not from an allowed registry "
            f"({', '.join(settings.ALLOWED_IMAGE_REGISTRIES)})",
        )
    return errors


def node_sizes(queue: Queue) -> list[tuple[int, int]]:
    """The allocatable (CPU millicores, memory MiB) of the nodes of the queue's GPU classes, as
    the cluster last reported them, each size once (0: the node did not say)."""
    allowed = Queue.allowed_gpu_classes.through.objects.filter(queue_id=queue.pk)
    return list(
        Node.objects.filter(
            Q(gpu_class_id__in=allowed.values("gpuclass_id")) | ~Exists(allowed),  # none: any
            gpu_class__isnull=False,
            gpu_class__active=True,
        )
        .values_list("cpu_millicores", "memory_mib")
        .distinct()
    )


def pod_size_problems(request: JobRequest, sizes: list[tuple[int, int]]) -> list[tuple[str, str]]:
    """(field, message) for a pod no node of the queue could hold. The engine plans GPUs; CPU
    and memory only the cluster's scheduler places, and it would leave such a pod unschedulable.
    Nothing is refused while a node's size is unknown (no node mirrored yet, or one not saying)."""
    if not sizes or any(not cpu or not memory for cpu, memory in sizes):
        return []
    cpu, memory = request.cpu_millicores_per_pod, request.memory_mib_per_pod
    queue = request.queue.name
    problems = []
    most_cpu = max(c for c, _ in sizes)
    most_memory = max(m for _, m in sizes)
    if cpu > most_cpu:
        problems.append(
            (
                "cpu_millicores_per_pod",
                f"{cpu / 1000:g} CPU cores per pod is more than any node of queue {queue} can "
                f"give a pod (the largest has {most_cpu / 1000:g} CPU cores allocatable)",
            )
        )
    if memory > most_memory:
        problems.append(
            (
                "memory_mib_per_pod",
                f"{memory:,} MiB per pod is more than any node of queue {queue} can give a pod "
                f"(the largest has {most_memory:,} MiB allocatable)",
            )
        )
    if not problems and not any(pods_held(c, m, cpu, memory, 1) for c, m in sizes):
        problems.append(
            (
                "cpu_millicores_per_pod",
                f"no node of queue {queue} has both {cpu / 1000:g} CPU cores and {memory:,} MiB "
                "allocatable for one pod: ask for less of one",
            )
        )
    return problems


def _memberships(request: JobRequest) -> tuple[bool, bool, bool]:
    """Whether the owner is in the team, the team may use the queue and the queue allows the
    capability class: three membership tests in one query (a submission's hot path)."""
    team, queue = request.team, request.queue
    row = (
        Team.objects.filter(pk=team.pk)
        .annotate(
            member=Exists(
                Team.members.through.objects.filter(team_id=team.pk, user_id=request.owner.pk)
            ),
            team_allowed=Exists(
                Queue.teams.through.objects.filter(queue_id=queue.pk, team_id=team.pk)
            ),
            class_allowed=Exists(
                Queue.allowed_capability_classes.through.objects.filter(
                    queue_id=queue.pk, capabilityclass_id=request.capability_class.pk
                )
            ),
        )
        .values_list("member", "team_allowed", "class_allowed")
        .first()
    )
    return row or (False, False, False)


def image_allowed(image: str) -> bool:
    """Whether ``image`` comes from a registry the portal allows (any, when none is set).

    The registry is the part before the first ``/`` when it looks like a host (has a dot or a
    port, or is ``localhost``); otherwise the image is on the default registry, ``docker.io``.
    """
    allowed = settings.ALLOWED_IMAGE_REGISTRIES
    if not allowed:
        return True
    first, sep, _ = image.partition("/")
    registry = (
        first if sep and ("." in first or ":" in first or first == "localhost") else "docker.io"
    )
    return registry in allowed


def _fraction_text(value: Fraction) -> str:
    return display(
        (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.001"))
    )


def capability_class_share(capability_class: CapabilityClass, queue: Queue) -> Fraction:
    """GPU-equivalents of one device of this request in this queue: a MIG slice its share on the
    cheapest allowed class that offers it; a whole GPU 1 (a time-slice replica is counted by the
    engine per node)."""
    if not capability_class.mig_profile:
        return Fraction(1)
    for gpu_class in queue.allowed_gpu_classes.order_by("tier", "name"):
        if capability_class.mig_profile in gpu_class.mig_profiles:
            return gpu_class.mig_share(capability_class.mig_profile)
    return Fraction(1)
