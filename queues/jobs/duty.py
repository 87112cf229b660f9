"""GPU duty cycle: allocated is not busy. For each pod that held GPUs in a window, its GPU-hours
there (the usage interval's, clipped) split by the average GPU utilization DCGM reported for it
(through Prometheus, ``queues.cluster.prometheus``) into busy and allocated-but-idle hours:

    busy_gpu_hours = gpu_hours × utilization / 100
    idle_gpu_hours = gpu_hours − busy_gpu_hours

A pod Prometheus has no series for is counted apart (``unmeasured_gpu_hours``), never as idle
or busy. Time-sliced pods share a GPU: DCGM reports the whole GPU's utilization against each
pod on it, so their split is marked ``shared`` and says so where it is shown."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db import transaction
from django.db.models import Count, Max, Min, Q

from queues.cluster.prometheus import Prometheus, PrometheusUnavailable, gpu_util_query
from queues.counters import (
    DUTY_COUNTED_UNTIL,
    GPU_ALLOCATED_SECONDS,
    GPU_BUSY_SECONDS,
    counter_add,
)
from queues.models import MetricCounter, SharingMode, UsageInterval
from queues.rates import MICROSECONDS_PER_HOUR, round_hours


@dataclass(frozen=True)
class DutyLine:
    """One job's (or pod's) split in the window; team and queue name it for the sums."""

    job_id: int
    team: str
    queue: str
    gpu_hours: Decimal
    busy_gpu_hours: Decimal
    idle_gpu_hours: Decimal
    unmeasured_gpu_hours: Decimal
    shared: bool
    gpu_class: str = ""


def duty_lines(
    prometheus: Prometheus,
    *,
    start: datetime,
    end: datetime,
    job_ids: list[int] | None = None,
) -> list[DutyLine]:
    """Per job, the duty split of its pods' GPU-hours in [``start``, ``end``) (only ``job_ids``'
    when given). One Prometheus query (utilization averaged over the window, per pod); raises
    ``PrometheusUnavailable`` when it cannot be asked."""
    intervals = UsageInterval.objects.filter(started_at__lt=end).exclude(ended_at__lte=start)
    if job_ids is not None:
        intervals = intervals.filter(job_id__in=job_ids)
    rows = list(
        intervals.values_list(
            "job_id",
            "job__queue__name",
            "team__name",
            "team__namespace",
            "pod_name",
            "devices",
            "share_numerator",
            "share_denominator",
            "sharing_mode",
            "started_at",
            "ended_at",
            "gpu_class__name",
        )
    )
    if not rows:
        return []
    namespaces = sorted({r[3] for r in rows})
    pods = sorted({r[4] for r in rows}) if job_ids is not None else None
    util = {
        (s.labels.get("namespace", ""), s.labels.get("pod", "")): s.value
        for s in prometheus.query(
            gpu_util_query(window=end - start, namespaces=namespaces, pods=pods), at=end
        )
    }
    sums: dict[int, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    names: dict[int, tuple[str, str, str]] = {}
    shared: dict[int, bool] = defaultdict(bool)
    for (
        job_id,
        queue,
        team,
        namespace,
        pod,
        devices,
        numerator,
        denominator,
        sharing,
        started,
        ended,
        gpu_class,
    ) in rows:
        held = min(ended or end, end) - max(started, start)
        if held <= timedelta(0):
            continue
        gpu_hours = Fraction(
            held // timedelta(microseconds=1) * devices * numerator,
            MICROSECONDS_PER_HOUR * denominator,
        )
        names[job_id] = (team, queue, gpu_class)
        shared[job_id] |= sharing == SharingMode.TIME_SLICED
        sums[job_id]["gpu"] += gpu_hours
        value = util.get((namespace, pod))
        if value is None:
            sums[job_id]["unmeasured"] += gpu_hours
            continue
        busy = gpu_hours * Fraction(min(max(value, 0.0), 100.0)).limit_denominator(10**6) / 100
        sums[job_id]["busy"] += busy
    return [
        DutyLine(
            job_id=job_id,
            team=names[job_id][0],
            queue=names[job_id][1],
            **rounded_parts(s["gpu"], busy=s["busy"], unmeasured=s["unmeasured"]),
            shared=shared[job_id],
            gpu_class=names[job_id][2],
        )
        for job_id, s in sorted(sums.items())
    ]


def rounded_parts(gpu: Fraction, *, busy: Fraction, unmeasured: Fraction) -> dict[str, Decimal]:
    """A job's GPU-hours and its parts, each rounded once — idle being what the rounded parts
    leave, so busy + idle + unmeasured is the GPU-hours shown (rounding each part alone could
    show 0.003 busy + 0.016 idle of 0.018 held)."""
    held, busy_h, unmeasured_h = round_hours(gpu), round_hours(busy), round_hours(unmeasured)
    return {
        "gpu_hours": held,
        "busy_gpu_hours": busy_h,
        "idle_gpu_hours": max(held - busy_h - unmeasured_h, Decimal(0)),
        "unmeasured_gpu_hours": unmeasured_h,
    }


@dataclass(frozen=True)
class DutySum:
    name: str
    gpu_hours: Decimal
    busy_gpu_hours: Decimal
    idle_gpu_hours: Decimal
    unmeasured_gpu_hours: Decimal
    shared: bool

    @property
    def idle_share(self) -> Decimal | None:
        """Idle over measured GPU-hours, in percent."""
        measured = self.busy_gpu_hours + self.idle_gpu_hours
        if not measured:
            return None
        return (self.idle_gpu_hours * 100 / measured).quantize(Decimal("0.1"))


def duty_by(lines: list[DutyLine], key: str) -> list[DutySum]:
    """The lines summed by ``key`` ("team" or "queue"), most idle first."""
    groups: dict[str, list[DutyLine]] = defaultdict(list)
    for line in lines:
        groups[getattr(line, key)].append(line)
    sums = [
        DutySum(
            name=name,
            gpu_hours=sum((x.gpu_hours for x in group), Decimal(0)),
            busy_gpu_hours=sum((x.busy_gpu_hours for x in group), Decimal(0)),
            idle_gpu_hours=sum((x.idle_gpu_hours for x in group), Decimal(0)),
            unmeasured_gpu_hours=sum((x.unmeasured_gpu_hours for x in group), Decimal(0)),
            shared=any(x.shared for x in group),
        )
        for name, group in groups.items()
    ]
    return sorted(sums, key=lambda s: (-s.idle_gpu_hours, s.name))


@dataclass(frozen=True)
class JobDuty:
    """A job page's duty panel: not configured, Prometheus' error, or the job's own split."""

    configured: bool
    error: str = ""
    line: DutyLine | None = None


def job_duty(prometheus: Prometheus | None, *, job_id: int, now: datetime) -> JobDuty | None:
    """The job's split over all it held (None before it held any GPU)."""
    bounds = UsageInterval.objects.filter(job_id=job_id).aggregate(
        start=Min("started_at"), end=Max("ended_at"), open=Count("id", filter=Q(ended_at=None))
    )
    if bounds["start"] is None:
        return None
    if prometheus is None:
        return JobDuty(configured=False)
    end = now if bounds["open"] or bounds["end"] is None else min(bounds["end"], now)
    try:
        lines = duty_lines(prometheus, start=bounds["start"], end=end, job_ids=[job_id])
    except PrometheusUnavailable as exc:
        return JobDuty(configured=True, error=str(exc))
    return JobDuty(configured=True, line=lines[0] if lines else None)


# The first count looks this far back; later ones start where the last ended.
DUTY_COUNT_FIRST_WINDOW = timedelta(minutes=5)


def duty_count(prometheus: Prometheus, *, now: datetime) -> timedelta:
    """Add the GPU-seconds held and busy since the last count (at most a day back) to the
    duty-cycle counters /metrics exports, by GPU class and team; return the span counted.
    Running it twice for the same ``now`` counts once: the span's end is stored under a row
    lock with the sums. Raises ``PrometheusUnavailable`` (nothing counted, the span stays)."""
    with transaction.atomic():
        mark, _ = MetricCounter.objects.select_for_update().get_or_create(
            name=DUTY_COUNTED_UNTIL,
            label="",
            defaults={"value": (now - DUTY_COUNT_FIRST_WINDOW).timestamp()},
        )
        start = max(datetime.fromtimestamp(mark.value, now.tzinfo), now - timedelta(days=1))
        if start >= now:
            return timedelta(0)
        held: dict[str, Decimal] = defaultdict(Decimal)
        busy: dict[str, Decimal] = defaultdict(Decimal)
        for line in duty_lines(prometheus, start=start, end=now):
            key = f"{line.gpu_class}|{line.team}"
            held[key] += line.gpu_hours
            busy[key] += line.busy_gpu_hours
        for key in sorted(held):
            counter_add(GPU_ALLOCATED_SECONDS, key, float(held[key] * 3600))
            counter_add(GPU_BUSY_SECONDS, key, float(busy[key] * 3600))
        MetricCounter.objects.filter(pk=mark.pk).update(value=now.timestamp())
    return now - start
