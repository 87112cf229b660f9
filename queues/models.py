"""GPU Portal's domain: GPU and capability classes, queues, teams, quotas, reservations, nodes,
jobs, usage intervals and rate cards.

Units: every quota, limit and amount is in GPU-equivalents (a whole GPU is 1, a MIG slice its
share, a time-slice replica 1/replicas), stored as Decimal with three decimals. What must never
be violated is a database constraint, not only a form check.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q, Subquery

from portal.formatting import format_datetime
from queues.admission.capability import (
    CapabilityRequest,
    GpuClassSpec,
    Resolution,
    parse_share,
    resolve_capability,
)
from queues.admission.reasons import span_text
from queues.rates import CardTerms

# The one rule for a policy object's name (a DNS subdomain, as Kubernetes labels take it). Match
# it on the whole string (``NAME.fullmatch``): with ``re.match`` and ``$``, "gpu\n" would pass.
NAME_PATTERN = r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?"
NAME = re.compile(NAME_PATTERN)
NAME_VALIDATOR = RegexValidator(
    rf"\A{NAME_PATTERN}\Z",
    "Use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.",
)
# A Kubernetes namespace is a DNS-1123 label: no dots.
NAMESPACE_PATTERN = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
NAMESPACE_VALIDATOR = RegexValidator(
    rf"\A{NAMESPACE_PATTERN}\Z",
    "A namespace is a DNS label: lowercase letters, digits and '-', at most 63 characters.",
)


def gpu_amount_field(**kwargs: object) -> models.DecimalField:
    """A count of GPU-equivalents (three decimals: 1/7 of a GPU is stored as 0.143)."""
    return models.DecimalField(max_digits=10, decimal_places=3, **kwargs)  # type: ignore[arg-type]


# Kubernetes' default terminationGracePeriodSeconds: what pods get to stop unless a queue says.
DEFAULT_TERMINATION_GRACE = timedelta(seconds=30)


class PreemptionClass(models.TextChoices):
    NEVER = "never", "never preempted"
    GRACEFUL = "graceful", "graceful (with a grace period)"
    PREEMPTIBLE = "preemptible", "preemptible"


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "exclusive GPUs"
    MIG = "mig", "MIG slices"
    TIME_SLICED = "time-sliced", "time-sliced GPUs"


class Topology(models.TextChoices):
    ANY = "", "anywhere"
    RACK = "rack", "same rack"
    NETWORK_DOMAIN = "network_domain", "same network domain"


class ActiveQuerySet(models.QuerySet):
    def active(self) -> ActiveQuerySet:
        """Objects offered for new submissions (pruned-but-referenced ones are inactive)."""
        return self.filter(active=True)


class GpuClass(models.Model):
    """One kind of accelerator as the cluster has it."""

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    product = models.CharField(
        max_length=200,
        unique=True,
        help_text="nvidia.com/gpu.product as GPU feature discovery reports it, without the "
        "-SHARED and -MIG-… suffixes.",
    )
    description = models.TextField(blank=True)
    hbm_gb = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    precisions = models.JSONField(default=list, help_text='e.g. ["fp64", "bf16", "fp8"]')
    mig_profiles = models.JSONField(
        default=dict,
        blank=True,
        help_text='MIG profile → share of the GPU, e.g. {"1g.10gb": "1/7"}',
    )
    rdma = models.BooleanField(default=False)
    tier = models.PositiveSmallIntegerField(default=1, help_text="Higher is faster.")
    active = models.BooleanField(default=True)

    objects = ActiveQuerySet.as_manager()

    class Meta:
        ordering = ["tier", "name"]
        verbose_name = "GPU class"
        verbose_name_plural = "GPU classes"
        constraints = [
            models.CheckConstraint(condition=Q(hbm_gb__gt=0), name="gpu_class_hbm_positive"),
            models.CheckConstraint(condition=Q(tier__gt=0), name="gpu_class_tier_positive"),
        ]

    def __str__(self) -> str:
        return self.name

    def spec(self) -> GpuClassSpec:
        return GpuClassSpec(
            name=self.name,
            hbm_gb=self.hbm_gb,
            precisions=frozenset(self.precisions),
            mig_profiles={p: parse_share(s) for p, s in sorted(self.mig_profiles.items())},
            rdma=self.rdma,
            tier=self.tier,
        )

    def mig_share(self, profile: str) -> Fraction:
        return parse_share(self.mig_profiles[profile])

    def device_share(self, mig_profile: str, replicas: int) -> Fraction:
        """GPU-equivalents of one device of this class: a MIG slice its share of the GPU, a
        time-slice replica 1 / the node's replicas, a whole GPU 1. The one rule for a pod's
        share, used by admission, the catalog's free counts and usage intervals alike."""
        if mig_profile and mig_profile in self.mig_profiles:
            return self.mig_share(mig_profile)
        return Fraction(1, replicas)

    def node_capacity(self, gpu_count: int, mig_layout: dict[str, int]) -> Fraction:
        """GPU-equivalents a node of this class offers: its MIG slices' shares when it is cut
        into slices, else its GPUs (each time-slice replica is 1/replicas of one)."""
        if mig_layout:
            return sum(
                (n * self.mig_share(p) for p, n in mig_layout.items() if p in self.mig_profiles),
                Fraction(0),
            )
        return Fraction(gpu_count)


class CapabilityClass(models.Model):
    """What a job asks for instead of a SKU; resolves to the GPU classes that satisfy it."""

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    description = models.TextField(blank=True)
    min_hbm_gb = models.PositiveIntegerField(default=0)
    precisions = models.JSONField(default=list, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True)
    rdma = models.BooleanField(default=False)
    min_tier = models.PositiveSmallIntegerField(default=0)
    active = models.BooleanField(default=True)

    objects = ActiveQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "capability classes"

    def __str__(self) -> str:
        return self.name

    def request(self) -> CapabilityRequest:
        return CapabilityRequest(
            name=self.name,
            min_hbm_gb=self.min_hbm_gb,
            precisions=frozenset(self.precisions),
            mig_profile=self.mig_profile or None,
            rdma=self.rdma,
            min_tier=self.min_tier,
        )

    @property
    def asks_for(self) -> str:
        """The request in words: ``≥ 40 GB HBM, bf16, RDMA`` (``any GPU`` when empty)."""
        parts = []
        if self.mig_profile:
            parts.append(f"MIG slice {self.mig_profile}")
        if self.min_hbm_gb:
            parts.append(f"≥ {self.min_hbm_gb} GB HBM")
        parts += list(self.precisions)
        if self.rdma:
            parts.append("RDMA")
        if self.min_tier:
            parts.append(f"tier ≥ {self.min_tier}")
        return ", ".join(parts) or "any GPU"

    def resolve(self, gpu_classes: list[GpuClass]) -> Resolution:
        """Which of ``gpu_classes`` satisfy this class, and why each other one does not."""
        return resolve_capability(self.request(), [g.spec() for g in gpu_classes])


class Team(models.Model):
    """A tenant: members, Kubernetes namespace, cost center, fair-share weight, quotas.

    ``members`` is everyone in the team, whether the policy lists them or an identity-provider
    group the policy maps to the team (``groups``) gives them the team; ``TeamMembership`` says
    which (both may)."""

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    description = models.TextField(blank=True)
    namespace = models.CharField(max_length=63, unique=True, validators=[NAMESPACE_VALIDATOR])
    cost_center = models.CharField(max_length=64)
    fair_share_weight = models.DecimalField(max_digits=8, decimal_places=3, default=Decimal(1))
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="gpu_teams", blank=True, through="TeamMembership"
    )
    # Identity-provider groups whose members are in the team (refreshed at each of their logins).
    groups = models.JSONField(default=list, blank=True, help_text='e.g. ["gpu-nlp"]')
    active = models.BooleanField(default=True)

    objects = ActiveQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(fair_share_weight__gt=0), name="team_fair_share_weight_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class TeamMembership(models.Model):
    """One person in one team, and why: the policy lists them (``listed``, written only by the
    policy apply), an identity-provider group the team maps to gave them the team at their last
    login (``via_groups``, written only by the login), or both. The membership ends when neither
    holds, so a policy apply never removes whom a group gave the team, nor a login whom the
    policy lists. (The table is the one Django made for ``Team.members`` before it had a
    ``through`` model.)"""

    id = models.AutoField(primary_key=True)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    listed = models.BooleanField(default=True)
    via_groups = models.BooleanField(default=False)

    class Meta:
        db_table = "queues_team_members"
        unique_together = [("team", "user")]
        constraints = [
            models.CheckConstraint(
                condition=Q(listed=True) | Q(via_groups=True),
                name="team_membership_has_a_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"


class PortalRole(models.TextChoices):
    """The roles an identity provider's groups may give (``portal/roles.py`` says what each
    may do)."""

    FINANCE = "finance", "finance"
    ADMIN = "admin", "admin"


class RoleGroups(models.Model):
    """The identity-provider groups that give one role (the policy's ``roles`` section)."""

    role = models.CharField(max_length=16, choices=PortalRole.choices, unique=True)
    groups = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = "role groups"
        verbose_name_plural = "role groups"

    def __str__(self) -> str:
        return self.role


class RoleGrant(models.Model):
    """A role that a user's identity-provider groups gave them at a login. A later login whose
    groups no longer give it takes it back; a role given by hand (the Django admin,
    ``seed_demo``) has no row, and no login ever takes it away."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="role_grants"
    )
    role = models.CharField(max_length=16, choices=PortalRole.choices)
    granted_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "role"], name="role_grant_one_per_role"),
        ]

    def __str__(self) -> str:
        return f"{self.role} for {self.user}"


class TeamCostCenter(models.Model):
    """A team's cost center from ``effective_from`` until the team's next row: the history
    chargeback splits usage by (written by the policy apply when a team's cost center is set or
    changes; before a team's first row, a usage interval's own cost center holds)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="cost_centers")
    cost_center = models.CharField(max_length=64)
    effective_from = models.DateTimeField()

    class Meta:
        ordering = ["team", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "effective_from"], name="team_cost_center_one_per_instant"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}: {self.cost_center} from {self.effective_from:%Y-%m-%d %H:%M}"


class Quota(models.Model):
    """A team's share of one GPU class: guaranteed (nominal) and how far beyond it may borrow."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="quotas")
    nominal = gpu_amount_field(default=Decimal(0))
    borrowing_limit = gpu_amount_field(default=Decimal(0))

    class Meta:
        ordering = ["team__name", "gpu_class__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_class"], name="quota_one_per_team_class"),
            models.CheckConstraint(condition=Q(nominal__gte=0), name="quota_nominal_not_negative"),
            models.CheckConstraint(
                condition=Q(borrowing_limit__gte=0), name="quota_borrowing_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} · {self.gpu_class}: {self.nominal} (+{self.borrowing_limit})"


class Queue(models.Model):
    """A service class with published terms: what a member is promised before submitting."""

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    description = models.TextField(blank=True)
    priority = models.IntegerField(default=0, help_text="Higher runs first.")
    expected_wait_target = models.DurationField()
    max_runtime = models.DurationField()
    default_runtime = models.DurationField()
    preemption_class = models.CharField(max_length=16, choices=PreemptionClass.choices)
    grace_period = models.DurationField(null=True, blank=True)
    sharing_mode = models.CharField(max_length=16, choices=SharingMode.choices)
    allowed_gpu_classes = models.ManyToManyField(GpuClass, related_name="queues")
    allowed_capability_classes = models.ManyToManyField(CapabilityClass, related_name="queues")
    checkpoint_interval = models.DurationField(null=True, blank=True)
    max_gpus_per_job = gpu_amount_field()
    max_running_jobs_per_user = models.PositiveIntegerField(null=True, blank=True)
    max_gpus_per_user = gpu_amount_field(null=True, blank=True)
    min_job_priority = models.IntegerField(default=0)
    default_job_priority = models.IntegerField(default=0)
    max_job_priority = models.IntegerField(default=0)
    teams = models.ManyToManyField(Team, related_name="queues", blank=True)
    may_borrow = models.BooleanField(default=False)
    reservation_only = models.BooleanField(default=False)
    required_topology = models.CharField(
        max_length=16, choices=Topology.choices, blank=True, default=Topology.ANY
    )
    active = models.BooleanField(default=True)

    objects = ActiveQuerySet.as_manager()

    class Meta:
        ordering = ["-priority", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(default_runtime__lte=F("max_runtime")),
                name="queue_default_runtime_within_max",
            ),
            models.CheckConstraint(
                condition=Q(max_gpus_per_job__gt=0), name="queue_max_gpus_per_job_positive"
            ),
            models.CheckConstraint(
                condition=Q(preemption_class=PreemptionClass.NEVER)
                | Q(checkpoint_interval__isnull=False),
                name="queue_preemptible_needs_checkpoint_interval",
            ),
            models.CheckConstraint(
                condition=~Q(preemption_class=PreemptionClass.GRACEFUL)
                | Q(grace_period__isnull=False),
                name="queue_graceful_needs_grace_period",
            ),
            models.CheckConstraint(
                condition=Q(may_borrow=False) | ~Q(preemption_class=PreemptionClass.NEVER),
                name="queue_only_preemptible_work_borrows",
            ),
            models.CheckConstraint(
                condition=Q(min_job_priority__lte=F("default_job_priority"))
                & Q(default_job_priority__lte=F("max_job_priority")),
                name="queue_job_priority_bounds_ordered",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def may_preempt(self) -> bool:
        return self.preemption_class != PreemptionClass.NEVER

    @property
    def termination_grace(self) -> timedelta:
        """What a preempted or cancelled job's pods get to stop: a graceful queue's grace
        period, otherwise Kubernetes' default termination grace."""
        if self.preemption_class == PreemptionClass.GRACEFUL and self.grace_period:
            return self.grace_period
        return DEFAULT_TERMINATION_GRACE


class Reservation(models.Model):
    """Guaranteed capacity for a team (optionally one queue) in a window, or standing."""

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="reservations")
    queue = models.ForeignKey(
        Queue, on_delete=models.PROTECT, related_name="reservations", null=True, blank=True
    )
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="reservations")
    amount = gpu_amount_field()
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    active = models.BooleanField(default=True)

    objects = ActiveQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="reservation_amount_positive"),
            models.CheckConstraint(
                condition=Q(starts_at__isnull=True, ends_at__isnull=True)
                | Q(starts_at__isnull=False, ends_at__isnull=False, ends_at__gt=F("starts_at")),
                name="reservation_standing_or_end_after_start",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def standing(self) -> bool:
        return self.starts_at is None

    def is_in_force(self, at: datetime) -> bool:
        if self.standing:
            return True
        assert self.starts_at is not None and self.ends_at is not None
        return self.starts_at <= at < self.ends_at


class MaintenanceState(models.TextChoices):
    NONE = "", "in service"
    CORDONED = "cordoned", "cordoned"
    DRAINING = "draining", "draining"


class Node(models.Model):
    """The portal's mirror of a cluster node (written by the reconcile, read by everything)."""

    name = models.CharField(max_length=253, unique=True)
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.PROTECT, related_name="nodes", null=True, blank=True
    )
    product = models.CharField(max_length=200, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    mig_layout = models.JSONField(
        default=dict, blank=True, help_text="MIG profile → slices on this node"
    )
    time_slice_replicas = models.PositiveIntegerField(default=1)
    rack = models.CharField(max_length=100, blank=True)
    network_domain = models.CharField(max_length=100, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    healthy = models.BooleanField(default=True)
    health_reason = models.CharField(max_length=300, blank=True)
    maintenance = models.CharField(
        max_length=16, choices=MaintenanceState.choices, blank=True, default=MaintenanceState.NONE
    )
    maintenance_reason = models.CharField(max_length=300, blank=True)
    maintenance_until = models.DateTimeField(null=True, blank=True)
    maintenance_deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="After this, work still running on the drained node is preempted.",
    )
    gpus_used_outside = gpu_amount_field(default=Decimal(0))
    outside_devices = models.JSONField(
        default=dict,
        blank=True,
        help_text='Devices held by pods the portal did not create: {"gpu": 2, "1g.10gb": 1}',
    )
    gpus_in_use = gpu_amount_field(
        default=Decimal(0),
        help_text="GPU-equivalents the portal's jobs hold here, as the last reconcile saw it.",
    )
    cpu_millicores = models.PositiveIntegerField(
        default=0, help_text="Allocatable CPU (millicores); 0 when the node does not say."
    )
    memory_mib = models.PositiveIntegerField(
        default=0, help_text="Allocatable memory (MiB); 0 when the node does not say."
    )
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(time_slice_replicas__gte=1), name="node_time_slice_replicas_positive"
            ),
            models.CheckConstraint(
                condition=Q(gpus_used_outside__gte=0), name="node_outside_use_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class NodeState(models.TextChoices):
    """What a node's GPUs were doing, as node-state intervals record it. ``available`` GPUs are
    in service for the portal (in use or free: usage intervals tell which); ``outside`` ones are
    held by pods the portal did not create, whatever the node's state."""

    AVAILABLE = "available", "in service"
    UNHEALTHY = "unhealthy", "unhealthy"
    MAINTENANCE = "maintenance", "maintenance"
    OUTSIDE = "outside", "used outside the portal"


class NodeStateInterval(models.Model):
    """Some of a node's GPUs in one state from a time to a time: the history behind capacity
    reports (chargeback's idle split, utilization over time). Opened and closed by the node pass
    when what it mirrors changes; at most one open row per node and state (a database
    constraint), so a rerun after a crash can neither open a second one nor count twice.

    The amount is exact GPU-equivalents (``amount_numerator / amount_denominator``): outside use
    can be MIG slices or time-slice replicas."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="state_intervals")
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.PROTECT, related_name="node_state_intervals"
    )
    state = models.CharField(max_length=16, choices=NodeState.choices)
    amount_numerator = models.PositiveIntegerField()
    amount_denominator = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            models.Index(fields=["gpu_class", "started_at"], name="node_state_class_started"),
            models.Index(fields=["node", "started_at"], name="node_state_node_started"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "state"],
                condition=Q(ended_at__isnull=True),
                name="node_state_one_open_per_node_state",
            ),
            models.CheckConstraint(
                condition=Q(amount_numerator__gt=0) & Q(amount_denominator__gte=1),
                name="node_state_amount_positive",
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="node_state_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.state} × {self.amount} from {self.started_at}"

    @property
    def amount(self) -> Fraction:
        return Fraction(self.amount_numerator, self.amount_denominator)


class JobState(models.TextChoices):
    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"


ACTIVE_JOB_STATES = (JobState.PENDING, JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTED)
FINISHED_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
# The states in which a job's pods hold GPUs. A job that has left them (cancelled, preempted,
# failed) still holds its GPUs while its pods terminate (``Job.terminating``): see
# ``JobQuerySet.holding_gpus``.
GPU_HOLDING_STATES = (JobState.ADMITTED, JobState.RUNNING)
# The states in which a job may have a Kubernetes Job and pods (a preempted job until requeued).
K8S_JOB_STATES = (*GPU_HOLDING_STATES, JobState.PREEMPTED)


# Past waits count for this long: a queue's p50/p90 and the ranges estimates draw on.
WAIT_HISTORY_WINDOW = timedelta(days=14)


class JobQuerySet(models.QuerySet["Job"]):
    def admitted_recently(self, now: datetime) -> JobQuerySet:
        """Jobs admitted within the wait history window before ``now`` (their waits are the
        history a queue publishes)."""
        return self.filter(admitted_at__isnull=False, admitted_at__gte=now - WAIT_HISTORY_WINDOW)

    def holding_gpus(self) -> JobQuerySet:
        """Jobs whose pods hold GPUs now: admitted or running, or ended with pods still
        terminating — except a preempted job whose GPUs its preemptor, admitted, already holds
        (they are promised once; the preemptor's pods start when the victim's are gone). The
        one rule the catalog's free GPUs and the engine's snapshot share."""
        # The preemptors as a subquery, not a join: a join made PostgreSQL read every job
        # ever submitted to find the few terminating ones' preemptors, every cycle.
        holding = Q(state__in=GPU_HOLDING_STATES)
        preemptors = self.model.objects.filter(holding).order_by().values("pk")
        return self.filter(
            holding | (Q(terminating=True) & ~Q(preempted_for_id__in=Subquery(preemptors)))
        )


class CapacityKind(models.TextChoices):
    NOMINAL = "nominal"
    BORROWED = "borrowed"
    RESERVED = "reserved"


class Job(models.Model):
    """A member's request for GPUs: one Kubernetes Job, a gang when it has several pods."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_jobs"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="jobs")
    capability_class = models.ForeignKey(
        CapabilityClass, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=100, blank=True)
    pods = models.PositiveIntegerField(default=1)
    gpus_per_pod = models.PositiveIntegerField(
        default=1, help_text="Devices per pod: whole GPUs, MIG slices or time-slice replicas."
    )
    mig_profile = models.CharField(max_length=32, blank=True)
    cpu_millicores_per_pod = models.PositiveIntegerField(default=1000)
    memory_mib_per_pod = models.PositiveIntegerField(default=4096)
    declared_gpu_memory_gb = models.PositiveIntegerField(null=True, blank=True)
    image = models.CharField(max_length=500)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text="Name → text, or a key of a Secret in the team's namespace "
        '({"secret": …, "key": …}). Values of secret-looking names are never shown '
        "(portal.masking).",
    )
    env_from = models.JSONField(
        default=list, blank=True, help_text="Secrets in the team's namespace: each key a variable."
    )
    holds_secret_values = models.BooleanField(
        default=False,
        help_text="Its environment keeps plain values of secret-looking names (the policy "
        "allowed them) that its pods may still need; masked once the job has ended.",
    )
    runtime_limit = models.DurationField()
    checkpoint_interval = models.DurationField(null=True, blank=True)
    priority = models.IntegerField(default=0)
    state = models.CharField(
        max_length=16, choices=JobState.choices, default=JobState.PENDING, db_index=True
    )
    terminating = models.BooleanField(default=False)
    preempted_for = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="victims",
        help_text="The job this one was preempted for, while its pods terminate.",
    )
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.PROTECT, related_name="jobs", null=True, blank=True
    )
    nodes = models.JSONField(default=list, blank=True, help_text="Node of each pod.")
    capacity_kind = models.CharField(max_length=16, choices=CapacityKind.choices, blank=True)
    reservation = models.ForeignKey(
        Reservation, on_delete=models.PROTECT, related_name="jobs", null=True, blank=True
    )
    k8s_job_name = models.CharField(max_length=63, blank=True)
    submitted_at = models.DateTimeField(db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    cluster_failures = models.PositiveIntegerField(
        default=0, help_text="Creates the cluster refused (4xx); the job fails after a few."
    )
    rollbacks = models.PositiveIntegerField(
        default=0,
        help_text="Times in a row the cluster could not start it after admission (back-off).",
    )
    not_before = models.DateTimeField(
        null=True, blank=True, help_text="After a roll-back, not admitted again before this."
    )
    exit_code = models.IntegerField(null=True, blank=True)
    failure_reason = models.CharField(max_length=300, blank=True)
    pending_reasons = models.JSONField(default=list, blank=True)
    estimated_start = models.DateTimeField(
        null=True, blank=True, help_text="The start at the latest: every job runs to its limit."
    )
    likely_start = models.DateTimeField(
        null=True, blank=True, help_text="The start when jobs run their predicted runtimes."
    )
    start_range_low = models.DateTimeField(
        null=True, blank=True, help_text="The start when jobs run their 10th-percentile runtimes."
    )
    start_range_high = models.DateTimeField(
        null=True, blank=True, help_text="The start when jobs run their 90th-percentile runtimes."
    )
    estimated_start_note = models.CharField(
        max_length=300, blank=True, help_text="Why the start is unknown."
    )
    position = models.PositiveIntegerField(null=True, blank=True)
    queue_length = models.PositiveIntegerField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["team", "state"], name="job_team_state"),
            models.Index(fields=["queue", "state"], name="job_queue_state"),
            models.Index(fields=["owner", "state"], name="job_owner_state"),
            # The catalog's past waits read recent admissions, per queue and (the engine's
            # snapshot: the latest few thousand) across queues; few jobs are terminating.
            models.Index(fields=["queue", "admitted_at"], name="job_queue_admitted"),
            models.Index(fields=["admitted_at"], name="job_admitted"),
            # The longest waiters (the operations dashboard): pending jobs oldest first, without
            # walking a month of finished jobs in submission order.
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted"),
            models.Index(
                fields=["terminating"], name="job_terminating", condition=Q(terminating=True)
            ),
            models.Index(
                fields=["holds_secret_values"],
                name="job_holds_secret_values",
                condition=Q(holds_secret_values=True),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(pods__gte=1), name="job_pods_positive"),
            models.CheckConstraint(
                condition=Q(gpus_per_pod__gte=1), name="job_gpus_per_pod_positive"
            ),
            models.CheckConstraint(
                condition=Q(cpu_millicores_per_pod__gt=0), name="job_cpu_positive"
            ),
            models.CheckConstraint(
                condition=Q(memory_mib_per_pod__gt=0), name="job_memory_positive"
            ),
            models.CheckConstraint(
                condition=Q(runtime_limit__gt=timedelta(0)),
                name="job_runtime_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.state})"

    def new_node_text(self, now: datetime) -> str:
        """``waiting for a new node, ready in about 6 min (p90 9 min)`` for a pending job
        whose reasons say a node pool is adding a node for it; empty otherwise."""
        if self.state != JobState.PENDING:
            return ""
        for reason in self.pending_reasons or []:
            details = reason.get("details") or {}
            if reason.get("code") != "Provisioning" or not details.get("ready_at"):
                continue
            ready = datetime.fromisoformat(details["ready_at"])
            ready_by = datetime.fromisoformat(details["ready_by"])
            left = ready - now
            about = span_text(left) if left >= timedelta(minutes=1) else "under a minute"
            late = max(ready_by - now, timedelta(0))
            return f"waiting for a new node, ready in about {about} (p90 {span_text(late)})"
        return ""

    @property
    def is_active(self) -> bool:
        """Not finished yet: pending, admitted, running or preempted (waiting to requeue)."""
        return self.state in ACTIVE_JOB_STATES

    @property
    def is_live(self) -> bool:
        """Still changing: active, or its pods are still terminating."""
        return self.is_active or self.terminating

    def stopping_until(self) -> datetime | None:
        """When a stopping job's pods are gone at the latest: its queue's grace period from when
        it was stopped (its latest event). None unless its pods are terminating. The reconcile's
        snapshot reads the same for every stopping job at once (``queues.reconcile.snapshot``)."""
        if not self.terminating:
            return None
        stopped = self.events.order_by("-at").values_list("at", flat=True).first()
        return None if stopped is None else stopped + self.queue.termination_grace


class EventKind(models.TextChoices):
    """What happened to a job, as its timeline and the API name it."""

    SUBMITTED = "submitted"
    ADMITTED = "admitted"
    STARTED = "started"
    CHECKPOINT = "checkpoint"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    ROLLED_BACK = "rolled back"
    CLUSTER_REFUSED = "cluster refused"
    QUOTA_HELD = "held by quota"  # its binding reason turned QuotaExceeded (quota evidence)
    QUOTA_RELEASED = "quota no longer binding"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobEvent(models.Model):
    """One entry of a job's timeline (submitted, admitted, started, preempted, finished…)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=32, choices=EventKind.choices)
    message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="job_event_job_at")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class FairShareSettings(models.Model):
    """Cluster-wide fair-share settings; one row (pk 1)."""

    usage_half_life = models.DurationField()

    class Meta:
        verbose_name = "fair-share settings"
        verbose_name_plural = "fair-share settings"
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="fair_share_settings_single_row"),
        ]

    def __str__(self) -> str:
        return f"usage half-life {self.usage_half_life}"


class SubmissionSettings(models.Model):
    """Cluster-wide rules on what a submission may carry; one row (pk 1), written by the
    policy's ``submissions`` section."""

    plain_env_names_allowed = models.JSONField(
        default=list,
        blank=True,
        help_text="Secret-looking environment variable names that may carry a plain value "
        "(their values are still never shown).",
    )

    class Meta:
        verbose_name = "submission settings"
        verbose_name_plural = "submission settings"
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="submission_settings_single_row"),
        ]

    def __str__(self) -> str:
        allowed = ", ".join(self.plain_env_names_allowed) or "none"
        return f"plain values allowed for: {allowed}"


class UsageInterval(models.Model):
    """One pod's hold on GPUs, with the start and end the cluster reported.

    Written by the reconcile, rated by chargeback. One row per pod (its UID is unique), so a
    hold is never opened or counted twice. An end the cluster did not report (the pod vanished)
    is the deletion time plus grace, or when the pod was first seen gone, and is marked estimated.
    """

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="usage")
    pod_uid = models.CharField(max_length=64, unique=True)
    pod_name = models.CharField(max_length=253)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="usage")
    cost_center = models.CharField(max_length=64)
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="usage")
    node = models.CharField(max_length=253)
    devices = models.PositiveIntegerField()
    share_numerator = models.PositiveIntegerField(default=1)
    share_denominator = models.PositiveIntegerField(default=1)
    sharing_mode = models.CharField(
        max_length=16,
        choices=SharingMode.choices,
        default=SharingMode.EXCLUSIVE,
        help_text="How the devices were shared: whole GPUs, MIG slices or time-slice replicas "
        "(a share of 1/7 alone cannot tell a 1g.10gb slice from one of 7 replicas).",
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    end_estimated = models.BooleanField(default=False)
    pod_deleted_at = models.DateTimeField(
        null=True, blank=True, help_text="When the pod was seen terminating (for an estimated end)."
    )
    grace_seconds = models.PositiveIntegerField(default=30)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["team", "started_at"], name="usage_team_started")]
        constraints = [
            models.CheckConstraint(condition=Q(devices__gte=1), name="usage_devices_positive"),
            models.CheckConstraint(
                condition=Q(share_numerator__gte=1)
                & Q(share_denominator__gte=1)
                & Q(share_numerator__lte=F("share_denominator")),
                name="usage_share_in_unit_interval",
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="usage_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pod_name} on {self.node}: {self.devices} × {self.share}"

    @property
    def share(self) -> Fraction:
        return Fraction(self.share_numerator, self.share_denominator)


class Lease(models.Model):
    """A named lease so that one process at a time does a thing (the reconcile). It expires if
    its holder dies; taking it is one conditional UPDATE, which SQLite and PostgreSQL both do
    atomically."""

    name = models.CharField(max_length=64, unique=True)
    holder = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder} until {self.expires_at:%H:%M:%S}"


class ClusterStatus(models.Model):
    """What the portal last knew of its connection to the cluster (one row, pk 1)."""

    reachable = models.BooleanField(default=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_cycle_at = models.DateTimeField(
        null=True, blank=True, help_text="When the last reconcile cycle ended."
    )
    last_cycle_seconds = models.FloatField(null=True, blank=True)
    resource_versions = models.JSONField(default=dict, blank=True)
    unknown_jobs = models.JSONField(
        default=list,
        blank=True,
        help_text="Kubernetes Jobs with the portal's labels but no job in the database "
        "(namespace/name); reported, never deleted automatically.",
    )

    class Meta:
        verbose_name_plural = "cluster status"
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="cluster_status_single_row"),
        ]

    def __str__(self) -> str:
        return "reachable" if self.reachable else f"unreachable since {self.unreachable_since}"


class QueueEstimate(models.Model):
    """When a queue's default job would start for a team now (1 GPU-equivalent, default runtime,
    cheapest allowed class), from the last reconcile's forecast: at the latest
    (``estimated_start``) and likely (``likely_start``), the same prediction as the jobs'."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="estimates")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="queue_estimates")
    estimated_start = models.DateTimeField(null=True, blank=True)
    likely_start = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "team"], name="queue_estimate_one_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.queue} for {self.team}: {self.estimated_start}"


class QueueStats(models.Model):
    """A queue's live numbers for the catalog, refreshed by every reconcile (pages read one row
    instead of summing the cluster per request): free GPU-equivalents per allowed class, past
    waits, and how many jobs wait and run."""

    queue = models.OneToOneField(Queue, on_delete=models.CASCADE, related_name="stats")
    free = models.JSONField(default=dict, help_text="GPU class → free GPU-equivalents (text)")
    wait_p50 = models.DurationField(null=True, blank=True)
    wait_p90 = models.DurationField(null=True, blank=True)
    pending = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    computed_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "queue stats"

    def __str__(self) -> str:
        return f"{self.queue}: {self.pending} pending, {self.running} running"


# --- Rate cards: what a GPU-hour of each class is worth ---------------------------------------


class RateCardQuerySet(models.QuerySet["RateCard"]):
    def in_force(self, at: datetime) -> RateCard | None:
        """The rate card in force at ``at``: the latest whose ``effective_from`` is not after it."""
        return self.filter(effective_from__lte=at).order_by("-effective_from").first()

    def terms(self) -> list[CardTerms]:
        """Every card as the rating rule takes them (queues.rates.rate_interval), oldest first;
        two queries. A card's version is its ``effective_from`` as the policy file keys it."""
        weights: dict[int, dict[str, Decimal]] = {}
        for card_id, class_name, weight in RateCardWeight.objects.filter(
            rate_card__in=self
        ).values_list("rate_card_id", "gpu_class__name", "weight"):
            weights.setdefault(card_id, {})[class_name] = weight
        return [
            CardTerms(
                effective_from=card.effective_from,
                weights=weights.get(card.pk, {}),
                price=card.price_per_normalized_gpu_hour,
                currency=card.currency,
                version=card.version,
            )
            for card in self.order_by("effective_from")
        ]


class BudgetScope(models.TextChoices):
    TEAM = "team", "team"
    COST_CENTER = "cost_center", "cost center"


class Budget(models.Model):
    """A monthly budget of a team or a cost center (the policy's ``budgets`` section): every
    month (``month`` empty), or one month, which takes precedence over the monthly one. The
    policy apply replaces all rows when the file has the section."""

    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    name = models.CharField(max_length=64, help_text="The team's name or the cost center.")
    month = models.DateField(null=True, blank=True, help_text="Its first day; empty: every month.")
    amount = models.DecimalField(max_digits=18, decimal_places=2)
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ["scope", "name", "month"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "name", "month"], name="budget_unique"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="budget_positive"),
        ]

    def __str__(self) -> str:
        when = f"{self.month:%Y-%m}" if self.month else "monthly"
        return f"{self.scope} {self.name} {when}: {self.amount} {self.currency}"


class RateCard(models.Model):
    """Price per normalized GPU-hour from ``effective_from`` until the next card takes over.

    Effective-dated and never rewritten (bills already computed depend on it). The weights per
    GPU class live only here: fair share and chargeback both read them."""

    effective_from = models.DateTimeField(unique=True)
    currency = models.CharField(max_length=3)
    price_per_normalized_gpu_hour = models.DecimalField(max_digits=12, decimal_places=4)
    note = models.CharField(max_length=200, blank=True)

    objects = RateCardQuerySet.as_manager()

    class Meta:
        ordering = ["-effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(price_per_normalized_gpu_hour__gte=0),
                name="rate_card_price_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="rate_card_currency_iso_code"
            ),
        ]

    def __str__(self) -> str:
        return f"rate card from {self.effective_from:%Y-%m-%d %H:%M} UTC ({self.currency})"

    @property
    def version(self) -> str:
        """How statements name the card: its ``effective_from`` as the policy file keys it."""
        return format_datetime(self.effective_from)


class RateCardWeight(models.Model):
    """A GPU class's billing weight (its accelerator value) on one rate card."""

    rate_card = models.ForeignKey(RateCard, on_delete=models.CASCADE, related_name="weights")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="rate_weights")
    weight = models.DecimalField(max_digits=8, decimal_places=3)

    class Meta:
        ordering = ["rate_card", "gpu_class__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["rate_card", "gpu_class"], name="rate_weight_one_per_card_class"
            ),
            models.CheckConstraint(condition=Q(weight__gt=0), name="rate_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_class}: ×{self.weight}"


# --- Quota requests: a member asks, an admin decides -------------------------------------------


class QuotaRequestStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DECLINED = "declined"


class QuotaRequest(models.Model):
    """A member's request for more quota of one GPU class for one team, with the evidence the
    portal had when it was filed; an admin approves (the quota changes through the policy
    service) or declines with a reason. Never deleted: the request and its evidence stay."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="quota_requests")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="quota_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests"
    )
    nominal = gpu_amount_field(help_text="Requested nominal quota (GPU-equivalents).")
    borrowing_limit = gpu_amount_field(help_text="Requested borrowing limit (GPU-equivalents).")
    justification = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16,
        choices=QuotaRequestStatus.choices,
        default=QuotaRequestStatus.PENDING,
        db_index=True,
    )
    created_at = models.DateTimeField()
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="quota_decisions",
        null=True,
        blank=True,
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    granted_nominal = gpu_amount_field(
        null=True, blank=True, help_text="Nominal quota granted (approved requests)."
    )
    granted_borrowing_limit = gpu_amount_field(
        null=True, blank=True, help_text="Borrowing limit granted (approved requests)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(nominal__gte=0), name="quota_request_nominal_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(borrowing_limit__gte=0), name="quota_request_borrowing_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"quota request {self.pk}: {self.team} · {self.gpu_class} ({self.status})"

    @property
    def partly_granted(self) -> bool:
        """Approved with less than was asked (the admin said why in ``decision_reason``)."""
        return self.status == QuotaRequestStatus.APPROVED and (
            self.granted_nominal != self.nominal
            or self.granted_borrowing_limit != self.borrowing_limit
        )


# --- Operations history: what the reconcile saw, pre-aggregated for /ops/ and /metrics -------


class CapacitySample(models.Model):
    """One GPU class's capacity by state as the reconcile saw it in one minute (the last cycle
    of the minute wins): GPU-equivalents in use by the portal's jobs, free, free but reserved
    for a team, unhealthy, in maintenance, held by pods the portal did not create; and the
    fragmentation of what is free: how many pods of 1, 2, 4 and 8 whole GPUs would fit now.
    Each row stands for one minute, so GPU-minutes are sums of rows (docs/operations-dashboard.md).
    """

    at = models.DateTimeField(help_text="The minute (UTC, seconds zero).")
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.CASCADE, related_name="capacity_samples"
    )
    in_use = gpu_amount_field(default=Decimal(0))
    free = gpu_amount_field(default=Decimal(0))
    reserved_idle = gpu_amount_field(default=Decimal(0))
    unhealthy = gpu_amount_field(default=Decimal(0))
    maintenance = gpu_amount_field(default=Decimal(0))
    outside = gpu_amount_field(default=Decimal(0))
    largest_free = models.PositiveIntegerField(
        default=0, help_text="Most free whole GPUs on one in-service node."
    )
    slots = models.JSONField(
        default=dict, help_text='Pods of n whole GPUs that fit now: {"1": 24, "8": 0}'
    )

    class Meta:
        ordering = ["at", "gpu_class_id"]
        indexes = [models.Index(fields=["at"], name="capacity_sample_at")]
        constraints = [
            models.UniqueConstraint(fields=["gpu_class", "at"], name="capacity_sample_one_a_minute")
        ]

    def __str__(self) -> str:
        return f"{self.gpu_class_id} at {self.at:%Y-%m-%d %H:%M}: {self.in_use} in use"

    @property
    def unheld(self) -> Decimal:
        """In service and held by nobody: free, reserved-but-idle included (what gang slots
        are counted on)."""
        return self.free + self.reserved_idle


class CapacityHour(models.Model):
    """One GPU class's ``CapacitySample`` rows of one past hour, summed (GPU-equivalent
    minutes per state, and how many minutes were sampled): the over-time views read these
    instead of every minute. Rolled up by the reconcile once the hour has passed."""

    hour = models.DateTimeField()
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.CASCADE, related_name="capacity_hours")
    minutes = models.PositiveIntegerField()
    in_use = models.DecimalField(max_digits=16, decimal_places=3)
    free = models.DecimalField(max_digits=16, decimal_places=3)
    reserved_idle = models.DecimalField(max_digits=16, decimal_places=3)
    unhealthy = models.DecimalField(max_digits=16, decimal_places=3)
    maintenance = models.DecimalField(max_digits=16, decimal_places=3)
    outside = models.DecimalField(max_digits=16, decimal_places=3)

    class Meta:
        ordering = ["hour", "gpu_class_id"]
        indexes = [models.Index(fields=["hour"], name="capacity_hour_hour")]
        constraints = [
            models.UniqueConstraint(fields=["gpu_class", "hour"], name="capacity_hour_one_per_hour")
        ]

    def __str__(self) -> str:
        return f"{self.gpu_class_id} {self.hour:%Y-%m-%d %H}h: {self.minutes} minutes"


class PendingSample(models.Model):
    """How many jobs of one queue waited on one binding reason in one minute (the reconcile's
    last cycle of the minute)."""

    at = models.DateTimeField()
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="pending_samples")
    code = models.CharField(max_length=40)
    jobs = models.PositiveIntegerField()

    class Meta:
        ordering = ["at", "queue_id", "code"]
        indexes = [models.Index(fields=["at"], name="pending_sample_at")]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "code", "at"], name="pending_sample_one_a_minute"
            )
        ]

    def __str__(self) -> str:
        return f"{self.queue_id} {self.code} at {self.at:%Y-%m-%d %H:%M}: {self.jobs}"


class QueueWaitDay(models.Model):
    """One queue's waits on one UTC day: of the jobs admitted that day, how many, how many
    within the queue's wait target (its SLO), and the nearest-rank p50 and p90 of their waits.
    Rolled up by the reconcile (today's row is refreshed each minute, past days once)."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="wait_days")
    day = models.DateField()
    admitted = models.PositiveIntegerField(default=0)
    within_target = models.PositiveIntegerField(default=0)
    target = models.DurationField(help_text="The queue's wait target the day was measured with.")
    wait_p50 = models.DurationField(null=True, blank=True)
    wait_p90 = models.DurationField(null=True, blank=True)
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["day", "queue_id"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "day"], name="queue_wait_day_one_per_day")
        ]

    def __str__(self) -> str:
        return f"{self.queue_id} on {self.day}: {self.within_target}/{self.admitted} within target"


class TeamStats(models.Model):
    """A team's standing as the last reconcile saw it: GPU-equivalents its jobs hold per class,
    and its decayed normalized GPU-hours (what fair share orders teams by, divided by weight)."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="stats")
    held = models.JSONField(default=dict, help_text="GPU class → GPU-equivalents held (text)")
    recent_usage = models.DecimalField(max_digits=16, decimal_places=3, default=Decimal(0))
    computed_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "team stats"

    def __str__(self) -> str:
        return f"{self.team_id}: {self.recent_usage} recent normalized GPU-h"


class MetricCounter(models.Model):
    """A monotonic counter /metrics exports, kept in the database so that every web worker,
    the Celery worker and beat add to one number (docs/operations-dashboard.md)."""

    name = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True, help_text="e.g. an error's kind")
    value = models.FloatField(default=0)

    class Meta:
        ordering = ["name", "label"]
        constraints = [
            models.UniqueConstraint(fields=["name", "label"], name="metric_counter_one_per_label")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.label}}} = {self.value}"


class SubmissionKey(models.Model):
    """A submission its sender may send again (the form's one-time key after Back, a script's
    ``Idempotency-Key`` after a time-out): the jobs the first one stored, for a day. A repeat
    with the same key gets those jobs instead of new ones (``queues.jobs.services``)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="submission_keys"
    )
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="sha256 of the request's fields")
    jobs = models.JSONField(default=list, help_text="The ids of the jobs stored, in order.")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="submission_key_once_per_owner")
        ]

    def __str__(self) -> str:
        return f"{self.owner_id}: {self.key} → {self.jobs}"


# --- Elastic capacity (docs/cluster.md, "Node pools") --------------------------------------------


class NodePool(models.Model):
    """Nodes of one GPU class that a provisioner adds and removes: their bounds, the shape of a
    new node, how long one takes to come (until history says better) and how long an empty one
    is kept. One pool per GPU class."""

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    description = models.TextField(blank=True)
    gpu_class = models.OneToOneField(GpuClass, on_delete=models.PROTECT, related_name="node_pool")
    min_nodes = models.PositiveIntegerField(default=0)
    max_nodes = models.PositiveIntegerField()
    node_gpus = models.PositiveIntegerField(help_text="GPUs on one new node")
    node_mig_layout = models.JSONField(
        default=dict, blank=True, help_text="MIG profile → slices on one new node"
    )
    node_time_slice_replicas = models.PositiveIntegerField(default=1)
    node_labels = models.JSONField(
        default=dict, blank=True, help_text="Labels of a new node, e.g. rack, network_domain"
    )
    lead_time_median = models.DurationField()
    lead_time_p90 = models.DurationField()
    scale_down_delay = models.DurationField()
    active = models.BooleanField(default=True)

    objects = ActiveQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(min_nodes__lte=F("max_nodes")), name="node_pool_min_within_max"
            ),
            models.CheckConstraint(
                condition=Q(lead_time_median__lte=F("lead_time_p90")),
                name="node_pool_lead_median_within_p90",
            ),
            models.CheckConstraint(
                condition=Q(node_time_slice_replicas__gte=1),
                name="node_pool_time_slice_replicas_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def lead_times(self) -> tuple[timedelta, timedelta, int]:
        """How long a new node takes (median, p90) and how many observed arrivals say so: the
        newest ``LEAD_HISTORY`` nodes that came, once ``LEARN_AFTER`` have; until then the
        policy's numbers (and 0)."""
        seen = [
            (ready - asked).total_seconds()
            for asked, ready in PoolNode.objects.filter(pool=self, requested_at__isnull=False)
            .order_by("-ready_at")
            .values_list("requested_at", "ready_at")[:LEAD_HISTORY]
            if asked is not None
        ]
        if len(seen) < LEARN_AFTER:
            return self.lead_time_median, self.lead_time_p90, 0
        median = timedelta(seconds=nearest_rank(seen, 0.5))
        p90 = max(median, timedelta(seconds=nearest_rank(seen, 0.9)))
        return median, p90, len(seen)


# Observed lead times replace a pool's policy numbers once this many nodes came; the newest count.
LEARN_AFTER = 5
LEAD_HISTORY = 50


def nearest_rank(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` 0.5: the median) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(share * len(ordered))) - 1]


class NodePoolQueue(models.Model):
    """A queue's terms on a pool: whether its jobs may have nodes added for them, and how many
    of the pool's nodes are kept ready for it (its warm floor)."""

    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="queue_terms")
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="pool_terms")
    may_scale_up = models.BooleanField(default=False)
    warm_nodes = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["pool", "queue"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "queue"], name="node_pool_queue_once")
        ]

    def __str__(self) -> str:
        return f"{self.pool} · {self.queue}"


class ProvisioningState(models.TextChoices):
    PROVISIONING = "provisioning", "provisioning"
    PROVISIONED = "provisioned", "provisioned"
    FAILED = "failed", "failed"


class NodeProvisioning(models.Model):
    """One request for nodes the portal made (a ``ProvisioningRequest`` in the cluster), what
    came of it, and the jobs it was made for. A failed one is retried as a new request
    (``attempt`` + 1, ``retry_of``)."""

    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="provisionings")
    object_name = models.CharField(max_length=253, unique=True)
    nodes = models.PositiveIntegerField()
    requested_at = models.DateTimeField()
    state = models.CharField(
        max_length=16, choices=ProvisioningState.choices, default=ProvisioningState.PROVISIONING
    )
    nodes_ready = models.JSONField(default=list, blank=True, help_text="Names of nodes come")
    finished_at = models.DateTimeField(null=True, blank=True)
    failure = models.CharField(max_length=500, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    retry_of = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="retries"
    )
    for_jobs = models.JSONField(default=list, blank=True, help_text="Job ids it was asked for")
    warm = models.PositiveIntegerField(default=0, help_text="Nodes of it asked for warm floors")

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [models.Index(fields=["state", "pool"], name="provisioning_state_pool")]
        constraints = [
            models.CheckConstraint(condition=Q(nodes__gte=1), name="provisioning_nodes_positive")
        ]

    def __str__(self) -> str:
        return self.object_name


class PoolNode(models.Model):
    """A node a pool's provisioner added: when it was asked for and Ready (its lead time), how
    long it sat ready with nothing on it (warm idle), and its removal."""

    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="pool_nodes")
    name = models.CharField(max_length=253, unique=True)
    gpus = models.PositiveIntegerField(default=0)
    provisioning = models.ForeignKey(
        NodeProvisioning, on_delete=models.SET_NULL, null=True, blank=True, related_name="arrived"
    )
    requested_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField()
    empty_since = models.DateTimeField(null=True, blank=True)
    idle_seconds = models.FloatField(default=0, help_text="Seconds ready with no pod on it")
    idle_checked_at = models.DateTimeField(null=True, blank=True)
    removal_requested_at = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pool", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def lead_time(self) -> timedelta | None:
        if self.requested_at is None:
            return None
        return self.ready_at - self.requested_at


class WarmHold(models.Model):
    """One node a queue's warm floor held empty for it, from when to when: the engine's
    ``warm_nodes``, recorded by the reconcile each cycle with node pools
    (``queues.reconcile.elastic.warm_holds_sync``). Chargeback's idle split reads it: an idle
    GPU on a held node is kept warm by a floor (docs/chargeback.md). At most one open row per
    node (a database constraint), so a rerun after a crash cannot open a second."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="warm_holds")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="warm_holds")
    queue = models.CharField(max_length=63, help_text="The queue whose floor held it")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["gpu_class", "started_at"], name="warm_hold_class_started")]
        constraints = [
            models.UniqueConstraint(
                fields=["node"], condition=Q(ended_at__isnull=True), name="warm_hold_one_open"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="warm_hold_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} warm for {self.queue} from {self.started_at}"


# --- Notifications (queues/notifications/) ------------------------------------------------------


class NotificationEvent(models.TextChoices):
    """What a person may be told about, as the settings page and the API name it."""

    JOB_STARTED = "job_started", "My job started"
    JOB_FINISHED = "job_finished", "My job finished"
    JOB_FAILED = "job_failed", "My job failed"
    JOB_PREEMPTED = "job_preempted", "My job was preempted or stopped by a drain"
    JOB_DRAIN_AHEAD = "job_drain_ahead", "My job will be stopped by a drain"
    JOB_START_LATER = "job_start_later", "My waiting job's latest start moved later"
    QUOTA_REQUEST_DECIDED = "quota_request_decided", "My quota request was decided"
    # Admins and finance only:
    QUEUE_PAST_TARGET = "queue_past_target", "A queue is past its wait target for an hour"
    BUDGET_EXCEEDED = "budget_exceeded", "A team or cost center is past its month's budget"


class NotificationChannel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class NotificationPreference(models.Model):
    """One person's choice for one event on one channel. Without a row the default holds
    (``queues.notifications.preferences.DEFAULTS``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    event = models.CharField(max_length=32, choices=NotificationEvent.choices)
    channel = models.CharField(max_length=16, choices=NotificationChannel.choices)
    enabled = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "event", "channel"], name="notification_preference_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.event} {self.channel}: {self.enabled}"


class NotificationWebhook(models.Model):
    """A person's webhook: where their notifications are POSTed, and the secret that signs them
    (``X-GPUPortal-Signature``). The secret is shown to its owner, who needs it to verify."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_webhook"
    )
    url = models.URLField(max_length=500, blank=True)
    secret = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.user_id} → {self.url or '(none)'}"


class TeamWebhook(models.Model):
    """A team's webhook (set by admins): its jobs' events of the kinds in ``events`` POSTed to
    one URL — the team's channel — signed with the team's own secret. The secret is shown on the
    admin page only, never through the API."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="notification_webhook")
    url = models.URLField(max_length=500, blank=True)
    secret = models.CharField(max_length=64)
    events = models.JSONField(default=list, blank=True, help_text='e.g. ["job_failed"]')
    since = models.DateTimeField(
        null=True, blank=True, help_text="URL or events last changed: earlier events are not sent."
    )

    def __str__(self) -> str:
        return f"team {self.team_id} → {self.url or '(none)'}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class NotificationDelivery(models.Model):
    """One event for one person on one channel. The unique key is what makes a notification
    go out at most once per event and channel: collecting an event twice (a retried task, two
    workers) adds no row, and a row is sent only by whoever claimed it (``claimed_by``)."""

    key = models.CharField(max_length=200, help_text="The event: job:42:failed:1234, …")
    # For a person, or for a team's webhook: one of the two.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="notification_deliveries",
        null=True,
        blank=True,
    )
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        related_name="notification_deliveries",
        null=True,
        blank=True,
    )
    channel = models.CharField(max_length=16, choices=NotificationChannel.choices)
    event = models.CharField(max_length=32, choices=NotificationEvent.choices)
    subject = models.CharField(max_length=300)
    text = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="After a failed send: not tried again before this."
    )
    claimed_by = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    message_id = models.CharField(
        max_length=200, blank=True, help_text="The message it went out in (a digest: several)."
    )
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key", "user", "channel"], name="notification_delivery_once"
            ),
            models.UniqueConstraint(
                fields=["key", "team", "channel"],
                condition=Q(team__isnull=False),
                name="notification_delivery_team_once",
            ),
            models.CheckConstraint(
                condition=Q(user__isnull=False, team__isnull=True)
                | Q(user__isnull=True, team__isnull=False),
                name="notification_delivery_user_or_team",
            ),
        ]
        indexes = [
            models.Index(fields=["user", "channel", "status"], name="notification_due"),
            models.Index(fields=["team", "channel", "status"], name="notification_team_due"),
        ]

    def __str__(self) -> str:
        to = f"team {self.team_id}" if self.team_id else self.user_id
        return f"{self.key} → {to} by {self.channel}: {self.status}"


class BudgetOverrun(models.Model):
    """A budget whose month's spend reached its amount: recorded once per budget and month by
    chargeback (``chargeback.budgets.budget_overruns_record``, the unique key), with the numbers
    as they were then; notifications read it as an outbox (admins and finance hear of it)."""

    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    name = models.CharField(max_length=64)
    month = models.DateField(help_text="The month's first day.")
    amount = models.DecimalField(max_digits=18, decimal_places=2)
    spent = models.DecimalField(max_digits=18, decimal_places=2)
    currency = models.CharField(max_length=3)
    at = models.DateTimeField(help_text="When the spend was seen past the budget.")

    class Meta:
        ordering = ["-at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "name", "month"], name="budget_overrun_once_a_month"
            )
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} {self.month:%Y-%m}: {self.spent} of {self.amount}"


class NotificationEstimate(models.Model):
    """A waiting job's "at the latest" as its owner last heard it (or first saw it): the start
    a later move is measured from."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="notified_estimate")
    estimated_start = models.DateTimeField()

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.estimated_start}"


class NotificationCursor(models.Model):
    """How far the collector has read the job timeline (the last ``JobEvent`` id); one row."""

    name = models.CharField(max_length=32, unique=True)
    position = models.BigIntegerField(default=0)
    start = models.BigIntegerField(
        default=0, help_text="The last id when collecting began: what came before is history."
    )

    def __str__(self) -> str:
        return f"{self.name} at {self.position}"
