"""Database rows → the admission engine's ``Snapshot`` (one read, a fixed number of queries).

The engine imports no Django; this module is the thin function that feeds it. Everything the
engine needs is read here and nowhere else.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict, namedtuple
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple

from django.contrib.auth import get_user_model
from django.db.models import F, Max

from queues import admission as engine
from queues.admission.never import per_user_gpu_cap
from queues.cluster.nodes import GPU_RESOURCE, LIFECYCLE_TAINTS
from queues.models import (
    DEFAULT_TERMINATION_GRACE,
    GPU_HOLDING_STATES,
    CapabilityClass,
    EventKind,
    FairShareSettings,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Node,
    Queue,
    Quota,
    RateCard,
    Reservation,
    Team,
    UsageInterval,
)
from queues.policy.parse import DEFAULT_USAGE_HALF_LIFE
from queues.rates import normalized_gpu_hours
from queues.reconcile.elastic import engine_pools, removed_node_names
from queues.reconcile.rows import RowMemo

# Fair share forgets usage older than this many half-lives (it weighs < 0.4 % by then).
USAGE_HORIZON_HALF_LIVES = 8
RECENT_WAITS = 200


# Runtime history: finished jobs of the last RUNTIME_HISTORY predict how long jobs run.
RUNTIME_HISTORY = timedelta(days=30)
RUNTIME_HISTORY_JOBS = 5000
# A queue needs this many finished jobs before its own history predicts; until then its jobs
# are predicted by the prior below.
RUNTIME_MIN_HISTORY = 5
# How many finished jobs of the queue one job of the same user and image is worth: a group
# with little history is shrunk toward the queue's ratio.
RUNTIME_SHRINK = 3
# The prior, for a queue with too little history of its own: the whole cluster's finished jobs
# (all queues) once there are RUNTIME_MIN_HISTORY of them, else this default — actual ÷
# requested runtime likely 0.7, 10th percentile 0.3, 90th 1.0: people ask for more time than
# their jobs use (batch traces commonly show jobs using half to three quarters of their limit),
# and a job never runs past its limit. So the first estimate after a cold start already has an
# interval, and "at the latest" (runtimes equal to limits) does not depend on it.
DEFAULT_RUNTIME_PRIOR = (0.7, 0.3, 1.0)

ForecastKey = tuple[str, str, str]  # queue, user, image
QueueRuntimes = tuple[float, float, float, dict[tuple[str, str], tuple[float, int]]]
PRIOR = ""  # the key of the prior in ``runtime_forecasts``' result (no queue has an empty name)


@functools.lru_cache(maxsize=4096)
def fraction(value: object) -> Fraction:
    """A stored number (a Decimal, an int) as an exact Fraction; the same few quotas, weights
    and limits recur for thousands of teams and queues, so each is converted once."""
    return Fraction(str(value))


def _ratios(values: list[float]) -> tuple[float, float, float]:
    """Mean, 10th and 90th percentile of ``values`` (sorted)."""
    mean = sum(values) / len(values)
    low = values[int(0.1 * (len(values) - 1))]
    high = values[math.ceil(0.9 * (len(values) - 1))]
    return mean, low, high


def runtime_forecasts(history: list[tuple[str, str, str, float]]) -> dict[str, QueueRuntimes]:
    """Per queue, from ``history`` rows (queue, user, image, actual / requested runtime): the
    queue's mean ratio, its 10th and 90th percentiles, and per (user, image) the group's mean
    ratio and count. A queue with fewer than ``RUNTIME_MIN_HISTORY`` rows takes the prior's
    ratios (its groups still count); the prior itself is under ``PRIOR``: the cluster's rows
    once there are enough, else ``DEFAULT_RUNTIME_PRIOR``."""
    by_queue: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for queue, user, image, ratio in history:
        by_queue[queue].append((user, image, min(1.0, max(0.01, ratio))))
    everything = sorted(r for rows in by_queue.values() for _, _, r in rows)
    prior = _ratios(everything) if len(everything) >= RUNTIME_MIN_HISTORY else DEFAULT_RUNTIME_PRIOR
    result: dict[str, QueueRuntimes] = {PRIOR: (*prior, {})}
    for queue, rows in by_queue.items():
        own = len(rows) >= RUNTIME_MIN_HISTORY
        mean, low, high = _ratios(sorted(r for _, _, r in rows)) if own else prior
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for user, image, ratio in rows:
            groups[(user, image)].append(ratio)
        result[queue] = (
            mean,
            low,
            high,
            {key: (sum(values) / len(values), len(values)) for key, values in groups.items()},
        )
    return result


def forecast_for(forecasts: dict[str, QueueRuntimes], key: ForecastKey) -> engine.Forecast | None:
    """The runtime forecast of a job of (queue, user, image): the group's mean ratio shrunk
    toward the queue's (``RUNTIME_SHRINK``), with the queue's 10th–90th spread moved with it;
    a queue without history of its own takes the prior's. None when ``forecasts`` is empty
    (a plan without estimates: the engine then assumes the runtime limit)."""
    queue, user, image = key
    known = forecasts.get(queue) or forecasts.get(PRIOR)
    if known is None:
        return None
    mean, low, high, groups = known
    group_mean, count = groups.get((user, image), (mean, 0))
    likely = (count * group_mean + RUNTIME_SHRINK * mean) / (count + RUNTIME_SHRINK)
    shift = likely - mean
    return engine.Forecast(
        likely=likely,
        low=min(likely, max(0.01, low + shift)),
        high=max(likely, min(1.0, high + shift)),
    )


def runtime_history(now: datetime) -> list[tuple[str, str, str, float]]:
    """(queue, user, image, actual / requested runtime) of the jobs that finished in the
    ``RUNTIME_HISTORY`` before ``now``: what ``runtime_forecasts`` learns from."""
    rows = (
        Job.objects.filter(
            state__in=(JobState.SUCCEEDED, JobState.FAILED),
            finished_at__gte=now - RUNTIME_HISTORY,
            finished_at__lte=now,
            started_at__isnull=False,
        )
        .order_by("-finished_at")
        .values_list(
            "queue__name",
            f"owner__{get_user_model().USERNAME_FIELD}",
            "image",
            "started_at",
            "finished_at",
            "runtime_limit",
        )[:RUNTIME_HISTORY_JOBS]
    )
    return [
        (queue, user, image, (finished - started) / limit)
        for queue, user, image, started, finished, limit in rows
        if limit
    ]


def snapshot_build(
    *,
    now: datetime,
    cluster_unreachable_since: datetime | None = None,
    forecasts: bool = True,
) -> engine.Snapshot:
    """The admission engine's view of the cluster and the policy at ``now``; without
    ``forecasts`` no job or queue carries a runtime forecast (for ``plan(estimates=False)``,
    which uses none: the finished jobs' history is not read)."""
    # with each class's node pool, if any (no query of its own: most clusters have none)
    gpu_classes = list(GpuClass.objects.active().select_related("node_pool").order_by("name"))
    card = RateCard.objects.in_force(now)
    card_weights = {w.gpu_class_id: w.weight for w in card.weights.all()} if card else {}
    weights = {class_id: fraction(weight) for class_id, weight in card_weights.items()}
    by_id = {g.pk: g for g in gpu_classes}
    half_life = (
        FairShareSettings.objects.filter(pk=1).values_list("usage_half_life", flat=True).first()
        or DEFAULT_USAGE_HALF_LIFE
    )
    pending = _PENDING_ROWS.read(Job.objects.filter(state=JobState.PENDING).order_by("id"))
    nodes = list(
        Node.objects.filter(gpu_class__isnull=False, gpu_class__active=True).order_by("name")
    )
    pooled = any(hasattr(g, "node_pool") and g.node_pool.active for g in gpu_classes)
    if pooled:
        removed = removed_node_names()
        nodes = [n for n in nodes if n.name not in removed]
    replicas_of = {n.name: n.time_slice_replicas for n in nodes}
    history = runtime_forecasts(runtime_history(now)) if forecasts else {}

    @functools.cache
    def forecast_of(queue: str, user: str, image: str) -> engine.Forecast | None:
        # thousands of waiting jobs share a few (queue, user, image) keys
        return forecast_for(history, (queue, user, image))

    return engine.Snapshot(
        now=now,
        gpu_classes=tuple(
            engine.GpuClass(spec=g.spec(), weight=weights.get(g.pk, Fraction(1)))
            for g in gpu_classes
        ),
        nodes=tuple(_node(n, by_id[n.gpu_class_id].name) for n in nodes if n.gpu_class_id in by_id),
        queues=tuple(_queues(now, history)),
        capability_classes=tuple(
            c.request() for c in CapabilityClass.objects.active().order_by("name")
        ),
        teams=tuple(_teams(now, half_life, card_weights)),
        reservations=tuple(
            engine.Reservation(
                id=r.pk,
                name=r.name,
                team=r.team.name,
                gpu_class=r.gpu_class.name,
                amount=fraction(r.amount),
                queue=r.queue.name if r.queue else None,
                start=r.starts_at,
                end=r.ends_at,
            )
            for r in Reservation.objects.active()
            .select_related("team", "queue", "gpu_class")
            .order_by("id")
        ),
        running=tuple(_running(replicas_of, now, history)),
        pending=_pending(pending, now, forecast_of),
        cluster_unreachable_since=cluster_unreachable_since,
        node_pools=engine_pools(nodes, now=now) if pooled else (),
    )


# A waiting job's columns, read without joins: thousands of rows each joined to four small
# tables cost more than mapping their ids to names here.
_PENDING_COLUMNS = (
    "id",
    "queue_id",
    "team_id",
    "owner_id",
    "capability_class_id",
    "submitted_at",
    "pods",
    "gpus_per_pod",
    "declared_gpu_memory_gb",
    "runtime_limit",
    "priority",
    "attempts",
    "cpu_millicores_per_pod",
    "memory_mib_per_pod",
    "not_before",
    "rollbacks",
    "image",
    "planned_nodes",
)
PendingRow = namedtuple("PendingRow", _PENDING_COLUMNS)  # type: ignore[misc]
# Every waiting job's row (``_PENDING_COLUMNS``). Plain values, not model instances: a thousand
# waiting jobs made five thousand instances (the job and four related rows) every cycle. On
# PostgreSQL only the rows written since the last snapshot are read whole.
_PENDING_ROWS: RowMemo[PendingRow] = RowMemo(_PENDING_COLUMNS, PendingRow)


# The last snapshot's waiting jobs by id, with everything each was built from: a cycle runs
# whenever a pod ends, and thousands of waiting jobs are the same as a second ago (a pure memo:
# a job whose row, names, scheduler message or forecast changed is built anew). Keyed by id
# and compared once, not hashed whole twice.
_PENDING_BUILT: dict[int, tuple[tuple[Any, ...], engine.PendingJob]] = {}


def _pending(
    rows: list[Any],
    now: datetime,
    forecast_of: Callable[[str, str, str], engine.Forecast | None],
) -> tuple[engine.PendingJob, ...]:
    """The engine's waiting jobs from their rows (``_PENDING_COLUMNS``), with names, the
    scheduler's last words after a roll-back, and runtime forecasts."""
    global _PENDING_BUILT
    said = _scheduler_messages([r.id for r in rows if r.not_before and r.not_before > now])
    queue_names = dict(Queue.objects.values_list("pk", "name"))
    team_names = dict(Team.objects.values_list("pk", "name"))
    capability_names = dict(CapabilityClass.objects.values_list("pk", "name"))
    user_model = get_user_model()
    user_names = dict(
        user_model.objects.filter(pk__in={r.owner_id for r in rows}).values_list(
            "pk", user_model.USERNAME_FIELD
        )
    )
    built: dict[int, tuple[tuple[Any, ...], engine.PendingJob]] = {}
    jobs = []
    for row in rows:
        queue, user = queue_names[row.queue_id], user_names[row.owner_id]
        names = (queue, team_names[row.team_id], user, capability_names[row.capability_class_id])
        key = (row, names, said.get(row.id, ""), forecast_of(queue, user, row.image))
        known = _PENDING_BUILT.get(row.id)
        if known is not None and known[0] == key:
            job = known[1]
        else:
            job = engine.PendingJob(
                id=row.id,
                queue=queue,
                team=names[1],
                user=user,
                capability=names[3],
                submitted_at=row.submitted_at,
                pods=row.pods,
                gpus_per_pod=row.gpus_per_pod,
                memory_gb=row.declared_gpu_memory_gb,
                runtime_limit=row.runtime_limit,
                priority=row.priority,
                attempts=row.attempts,
                cpu_millicores=row.cpu_millicores_per_pod,
                memory_mib=row.memory_mib_per_pod,
                not_before=row.not_before,
                rollbacks=row.rollbacks,
                unschedulable=key[2],
                forecast=key[3],
                planned_nodes=_planned_nodes(row.planned_nodes),
            )
        built[row.id] = (key, job)
        jobs.append(job)
    _PENDING_BUILT = built
    return tuple(jobs)


def _planned_nodes(stored: object) -> engine.PlannedNodes | None:
    """Where the last plan reserved the job's start (``Job.planned_nodes``), for the engine;
    None for anything but what the reconcile writes (a row edited by hand plans as without)."""
    if not isinstance(stored, dict):
        return None
    gpu_class, nodes = stored.get("gpu_class"), stored.get("nodes")
    if not isinstance(gpu_class, str) or not isinstance(nodes, list) or not nodes:
        return None
    if not all(isinstance(node, str) for node in nodes):
        return None
    return engine.PlannedNodes(gpu_class, tuple(nodes))


def _scheduler_messages(job_ids: list[int]) -> dict[int, str]:
    """What the cluster's scheduler said when each job was last rolled back (one query)."""
    if not job_ids:
        return {}
    said: dict[int, str] = {}
    for job_id, details in (
        JobEvent.objects.filter(job_id__in=job_ids, kind=EventKind.ROLLED_BACK)
        .order_by("job_id", "at", "id")
        .values_list("job_id", "details")
    ):
        said[job_id] = (details or {}).get("scheduler_message", "")  # the latest wins
    return said


def _node(node: Node, gpu_class: str) -> engine.Node:
    outside = node.outside_devices or {}
    replicas = node.time_slice_replicas
    untolerated = tuple(
        sorted(
            f"{t['key']}={t['value']}:{t['effect']}"
            if t.get("value")
            else f"{t['key']}:{t['effect']}"
            for t in node.taints
            # The cordon's and the lifecycle controller's taints: the node's maintenance and
            # health say them, with the reason.
            if t.get("key") != GPU_RESOURCE
            and t.get("key") not in LIFECYCLE_TAINTS
            and t.get("effect") in ("NoSchedule", "NoExecute")
        )
    )
    return engine.Node(
        name=node.name,
        gpu_class=gpu_class,
        gpus=node.gpu_count,
        mig=tuple(
            engine.MigSlots(profile=profile, total=total, outside=int(outside.get(profile, 0)))
            for profile, total in sorted(node.mig_layout.items())
        ),
        time_slice_replicas=replicas,
        rack=node.rack,
        network_domain=node.network_domain,
        taints=untolerated,
        healthy=node.healthy,
        health_reason=node.health_reason,
        maintenance=engine.MaintenanceState(node.maintenance or "none"),
        maintenance_reason=node.maintenance_reason,
        maintenance_until=node.maintenance_until,
        outside_gpu_eq=Fraction(int(outside.get("gpu", 0)), replicas),
        cpu_millicores=node.cpu_millicores,
        memory_mib=node.memory_mib,
    )


def _queues(
    now: datetime,
    forecasts: dict[str, QueueRuntimes],
) -> list[engine.Queue]:
    queues = (
        Queue.objects.active()
        .order_by("name")
        .prefetch_related("allowed_gpu_classes", "allowed_capability_classes", "teams")
    )
    waits: dict[int, list[timedelta]] = defaultdict(list)
    recent = (
        Job.objects.admitted_recently(now)
        .annotate(wait=F("admitted_at") - F("submitted_at"))
        .order_by("-admitted_at")
        .values_list("queue_id", "wait")[: RECENT_WAITS * 20]
    )
    for queue_id, wait in recent:
        if len(waits[queue_id]) < RECENT_WAITS:
            waits[queue_id].append(wait)
    return [
        engine.Queue(
            name=q.name,
            priority=q.priority,
            preemption=engine.PreemptionClass(q.preemption_class),
            grace_period=q.termination_grace,
            sharing=engine.SharingMode(q.sharing_mode),
            gpu_classes=tuple(sorted(g.name for g in q.allowed_gpu_classes.all())),
            capability_classes=tuple(sorted(c.name for c in q.allowed_capability_classes.all())),
            max_runtime=q.max_runtime,
            default_runtime=q.default_runtime,
            checkpoint_interval=q.checkpoint_interval,
            max_gpu_eq_per_job=fraction(q.max_gpus_per_job),
            max_running_jobs_per_user=q.max_running_jobs_per_user,
            max_gpu_eq_per_user=per_user_gpu_cap(q.max_gpus_per_user),
            may_borrow=q.may_borrow,
            reservation_only=q.reservation_only,
            required_topology=engine.TopologyScope(q.required_topology or "none"),
            teams=tuple(sorted(t.name for t in q.teams.all())),
            recent_waits=tuple(sorted(waits.get(q.pk, []))),
            forecast=forecast_for(forecasts, (q.name, "", "")),
        )
        for q in queues
    ]


@functools.lru_cache(maxsize=100_000)
def _normalized(
    held: timedelta, devices: int, numerator: int, denominator: int, weight: Decimal
) -> float:
    """``normalized_gpu_hours`` of one interval, remembered: every cycle weighs the usage of
    every interval of the fair-share horizon again, and a closed interval's never changes (its
    exact Decimal arithmetic was most of the snapshot's time with thousands of intervals)."""
    return float(
        normalized_gpu_hours(
            held=held, devices=devices, share=Fraction(numerator, denominator), weight=weight
        )
    )


# The usage intervals of the fair-share horizon: a closed one never changes, so after the first
# snapshot only the open ones and those written since are read whole (on PostgreSQL) — in the
# worker, which snapshots many times a second (``usage_rows_kept``); elsewhere (a preview, a
# page) they are read whole and not kept: a big site has a million in the 56 days.
class UsageRow(NamedTuple):
    id: int
    team_id: int
    gpu_class_id: int
    devices: int
    share_numerator: int
    share_denominator: int
    started_at: datetime
    ended_at: datetime | None


_USAGE_ROWS: RowMemo[UsageRow] = RowMemo(UsageRow._fields, UsageRow, keep=False)


def usage_rows_kept() -> None:
    """This process keeps the fair-share usage rows between snapshots (the worker)."""
    _USAGE_ROWS.keep = True


def _teams(now: datetime, half_life: timedelta, weights: dict[int, Decimal]) -> list[engine.Team]:
    usage: dict[int, float] = defaultdict(float)
    horizon = now - half_life * USAGE_HORIZON_HALF_LIVES
    for row in _USAGE_ROWS.read(UsageInterval.objects.exclude(ended_at__lt=horizon)):
        end = min(row.ended_at or now, now)
        normalized = _normalized(
            max(end - row.started_at, timedelta(0)),
            row.devices,
            row.share_numerator,
            row.share_denominator,
            weights.get(row.gpu_class_id, Decimal(1)),
        )
        # Fair share forgets usage with a half-life: what ended one half-life ago counts half.
        age = (now - end).total_seconds() / half_life.total_seconds()
        usage[row.team_id] += normalized * 0.5**age
    # Plain values, not model instances: at 2,000 teams (Kueue's large-scale replay) building a
    # Team and a Quota with its GPU class per team was a second of every cycle.
    quotas: dict[int, list[engine.Quota]] = defaultdict(list)
    for team_id, class_name, nominal, limit in (
        Quota.objects.filter(team__active=True)
        .order_by("gpu_class__name")
        .values_list("team_id", "gpu_class__name", "nominal", "borrowing_limit")
    ):
        quotas[team_id].append(engine.Quota(class_name, fraction(nominal), fraction(limit)))
    return [
        engine.Team(
            name=name,
            weight=fraction(weight),
            quotas=tuple(quotas[pk]),
            recent_usage=Fraction(usage.get(pk, 0.0)).limit_denominator(1000),
        )
        for pk, name, weight in Team.objects.active()
        .order_by("name")
        .values_list("pk", "name", "fair_share_weight")
    ]


def _running(
    replicas_of: dict[str, int],
    now: datetime,
    forecasts: dict[str, tuple[float, float, float, dict[tuple[str, str], tuple[float, int]]]],
) -> list[engine.RunningJob]:
    """The jobs holding GPUs (``Job.objects.holding_gpus``: terminating ones too), read as plain
    values: thousands of them, and building a model instance per job and per related row was
    most of a cycle's snapshot. A terminating job holds its GPUs until its pods are gone, at
    the latest its queue's termination grace from now."""
    classes = {g.pk: g for g in GpuClass.objects.all()}
    graces = {q.name: q.termination_grace for q in Queue.objects.all()}
    # When each stopping job was stopped: its latest event (cancelled, preempted, failed…).
    stopped_at = dict(
        JobEvent.objects.filter(job__terminating=True)
        .values("job_id")
        .annotate(at=Max("at"))
        .values_list("job_id", "at")
    )
    shares: dict[tuple[int, str, int], Fraction] = {}
    rows = (
        Job.objects.holding_gpus()
        .filter(gpu_class__isnull=False)
        .exclude(nodes=[])
        .order_by("id")
        .values_list(
            "state",
            "pk",
            "team__name",
            f"owner__{get_user_model().USERNAME_FIELD}",
            "queue__name",
            "gpu_class_id",
            "nodes",
            "gpus_per_pod",
            "mig_profile",
            "runtime_limit",
            "started_at",
            "priority",
            "declared_gpu_memory_gb",
            "last_checkpoint_at",
            "checkpoint_interval",
            "capacity_kind",
            "reservation_id",
            "pending_reasons",
            "image",
        )
    )
    running = []
    for (
        state,
        pk,
        team,
        user,
        queue,
        gpu_class_id,
        nodes,
        gpus_per_pod,
        mig_profile,
        runtime_limit,
        started_at,
        priority,
        memory_gb,
        last_checkpoint,
        checkpoint_interval,
        capacity_kind,
        reservation_id,
        pending_reasons,
        image,
    ) in rows:
        gpu_class = classes[gpu_class_id]
        replicas = max((replicas_of.get(n, 1) for n in nodes), default=1)
        key = (gpu_class_id, mig_profile, replicas)
        if key not in shares:
            shares[key] = gpu_class.device_share(mig_profile, replicas)
        per_pod = gpus_per_pod * shares[key]
        unschedulable = next(
            (
                (r.get("details") or {}).get("scheduler_message", "")
                for r in pending_reasons
                if r.get("code") == engine.ReasonCode.CLUSTER_UNSCHEDULABLE
            ),
            "",
        )
        terminating = state not in GPU_HOLDING_STATES
        if terminating:
            # Its pods are gone by the end of the grace period that began when it was stopped
            # (not a grace period from now: that end moved later with every cycle).
            started_at = min(stopped_at.get(pk, now), now)
            runtime_limit = graces.get(queue, DEFAULT_TERMINATION_GRACE)
        running.append(
            engine.RunningJob(
                id=pk,
                team=team,
                user=user,
                queue=queue,
                gpu_class=gpu_class.name,
                pods=tuple(nodes),
                gpu_eq_per_pod=per_pod,
                runtime_limit=runtime_limit,
                started_at=started_at,
                priority=priority,
                mig_profile=mig_profile or None,
                memory_gb=memory_gb,
                last_checkpoint=last_checkpoint,
                checkpoint_interval=checkpoint_interval,
                capacity=engine.CapacityKind(capacity_kind or "nominal"),
                reservation_id=reservation_id,
                unschedulable=unschedulable,
                terminating=terminating,
                forecast=None if terminating else forecast_for(forecasts, (queue, user, image)),
            )
        )
    return running
