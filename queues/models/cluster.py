"""The cluster as the reconcile mirrors it: nodes and their state over time, the reconcile's lease
and what the portal last knew of its connection."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from django.db import models
from django.db.models import F, Q

from queues.models.fields import gpu_amount_field
from queues.models.policy import GpuClass


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
