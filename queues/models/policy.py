"""The policy: GPU and capability classes, teams and their members, roles, cost centers, quotas,
queues, reservations, fair-share and submission settings."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from queues.admission.capability import (
    CapabilityRequest,
    GpuClassSpec,
    Resolution,
    parse_share,
    resolve_capability,
)
from queues.models.fields import (
    DEFAULT_TERMINATION_GRACE,
    NAME_VALIDATOR,
    NAMESPACE_VALIDATOR,
    ActiveQuerySet,
    gpu_amount_field,
)


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
