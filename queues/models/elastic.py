"""Elastic capacity (docs/cluster.md, "Node pools"): pools, the queues that may grow them, the
nodes asked for and the nodes they brought."""

from __future__ import annotations

import math
from datetime import timedelta

from django.db import models
from django.db.models import F, Q

from queues.models.fields import NAME_VALIDATOR, ActiveQuerySet
from queues.models.policy import GpuClass, Queue


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
