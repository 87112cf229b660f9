"""The admin side's reads: the quota grid, the evidence behind a quota request, the audit log,
nodes by maintenance state. Every number here is computed from stored rows, never estimated."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from auditlog.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import FieldDoesNotExist
from django.db.models import DateTimeField, Q, QuerySet

from portal.roles import is_admin
from queues import admission as engine
from queues.admission.reasons import time_text
from queues.models import (
    GPU_HOLDING_STATES,
    CapacityKind,
    EventKind,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Node,
    Quota,
    QuotaRequest,
    Reservation,
    Team,
    UsageInterval,
)
from queues.rates import gpu_amount
from queues.reconcile.plan import quota_bound_classes
from queues.reconcile.snapshot import snapshot_build

EVIDENCE_WINDOW = timedelta(days=30)
HOLDING = Q(state__in=(JobState.ADMITTED, JobState.RUNNING)) | Q(terminating=True)


def _decimal(value: Fraction, places: str = "0.001") -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal(places))


# --- Quota use -----------------------------------------------------------------------------------


def quota_use(team_ids: Iterable[int] | None = None) -> dict[tuple[int, int], Fraction]:
    """GPU-equivalents each (team, GPU class) holds on its quota now (nominal and borrowed
    capacity, not reservations): admitted, running and still-terminating jobs."""
    classes = {g.pk: g for g in GpuClass.objects.all()}
    replicas = dict(Node.objects.values_list("name", "time_slice_replicas"))
    jobs = Job.objects.filter(
        HOLDING,
        gpu_class__isnull=False,
        capacity_kind__in=(CapacityKind.NOMINAL, CapacityKind.BORROWED),
    )
    if team_ids is not None:
        jobs = jobs.filter(team_id__in=list(team_ids))
    use: dict[tuple[int, int], Fraction] = defaultdict(Fraction)
    for team_id, class_id, profile, pods, per_pod, nodes in jobs.values_list(
        "team_id", "gpu_class_id", "mig_profile", "pods", "gpus_per_pod", "nodes"
    ):
        gpu_class = classes[class_id]
        if profile and profile in gpu_class.mig_profiles:
            share = gpu_class.mig_share(profile)
        else:
            share = Fraction(1, max((replicas.get(n, 1) for n in nodes), default=1))
        use[(team_id, class_id)] += pods * per_pod * share
    return use


def held_back(team_ids: Iterable[int] | None = None) -> dict[tuple[int, str], list[int]]:
    """Pending jobs a quota holds back right now, by (team, GPU class): ``QuotaExceeded``, or
    ``NeverFits`` for want of quota on every class (see ``quota_bound_classes``)."""
    jobs = Job.objects.filter(
        state=JobState.PENDING,
        pending_reasons__0__code__in=[
            engine.ReasonCode.QUOTA_EXCEEDED.value,
            engine.ReasonCode.NEVER_FITS.value,
        ],
    )
    if team_ids is not None:
        jobs = jobs.filter(team_id__in=list(team_ids))
    held: dict[tuple[int, str], list[int]] = defaultdict(list)
    for job_id, team_id, reasons in jobs.order_by("id").values_list(
        "id", "team_id", "pending_reasons"
    ):
        for gpu_class in quota_bound_classes(reasons):
            held[(team_id, gpu_class)].append(job_id)
    return held


@dataclass(frozen=True)
class QuotaCell:
    team: Team
    gpu_class: GpuClass
    nominal: Decimal
    borrowing_limit: Decimal
    in_use: Decimal
    held_back: int

    @property
    def over_nominal(self) -> bool:
        return self.in_use > self.nominal


@dataclass(frozen=True)
class QuotaRow:
    team: Team
    cells: list[QuotaCell]


@dataclass(frozen=True)
class QuotaGrid:
    gpu_classes: list[GpuClass]
    rows: list[QuotaRow]
    totals: dict[str, Decimal]  # GPU class → sum of nominal quotas


def quota_grid() -> QuotaGrid:
    """Active teams × active GPU classes: nominal, borrowing limit, use now, jobs held back."""
    classes = list(GpuClass.objects.active().order_by("name"))
    teams = list(Team.objects.active().order_by("name"))
    quotas = {(q.team_id, q.gpu_class_id): q for q in Quota.objects.all()}
    use = quota_use()
    held = held_back()
    rows = []
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for team in teams:
        cells = []
        for gpu_class in classes:
            quota = quotas.get((team.pk, gpu_class.pk))
            nominal = quota.nominal if quota else Decimal(0)
            totals[gpu_class.name] += nominal
            cells.append(
                QuotaCell(
                    team=team,
                    gpu_class=gpu_class,
                    nominal=nominal,
                    borrowing_limit=quota.borrowing_limit if quota else Decimal(0),
                    in_use=_decimal(use.get((team.pk, gpu_class.pk), Fraction(0))),
                    held_back=len(held.get((team.pk, gpu_class.name), [])),
                )
            )
        rows.append(QuotaRow(team=team, cells=cells))
    return QuotaGrid(gpu_classes=classes, rows=rows, totals=dict(totals))


# --- Evidence for a quota request ----------------------------------------------------------------


@dataclass(frozen=True)
class QuotaEvidence:
    window_days: int
    waited_gpu_hours: Decimal
    waiting_jobs: int
    nominal: Decimal
    borrowing_limit: Decimal
    in_use: Decimal
    held_back: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "window_days": self.window_days,
            "waited_gpu_hours": str(self.waited_gpu_hours),
            "waiting_jobs": self.waiting_jobs,
            "nominal": str(self.nominal),
            "borrowing_limit": str(self.borrowing_limit),
            "in_use": str(self.in_use),
            "held_back": self.held_back,
        }


def quota_evidence(*, team: Team, gpu_class: GpuClass, now: datetime) -> QuotaEvidence:
    """What the portal knows for a quota request: GPU-hours the team's jobs spent held back by
    this class's quota in the last 30 days (from each ``held by quota`` timeline entry to the
    job's next entry, or now; times the GPU-equivalents it asked for), use against quota now,
    and the jobs held back now."""
    since = now - EVIDENCE_WINDOW
    job_ids = Job.objects.filter(team=team).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=since)
    )
    events = (
        JobEvent.objects.filter(job__in=job_ids, at__lte=now)
        .filter(Q(at__gte=since) | Q(kind=EventKind.QUOTA_HELD))
        .order_by("job_id", "at", "id")
        .values_list("job_id", "at", "kind", "details")
    )
    total = Fraction(0)
    jobs: set[int] = set()
    open_hold: tuple[int, datetime, Fraction] | None = None

    def close(end: datetime) -> None:
        nonlocal total, open_hold
        if open_hold is None:
            return
        job_id, start, amount = open_hold
        start = max(start, since)
        if end > start:
            seconds = Fraction(int((end - start).total_seconds()))
            total += seconds / 3600 * amount
            jobs.add(job_id)
        open_hold = None

    for job_id, at, kind, details in events:
        if open_hold is not None:
            # The job's next entry ends its hold; a hold with no entry after it lasts till now.
            close(at if open_hold[0] == job_id else now)
        if kind == EventKind.QUOTA_HELD and (details or {}).get("gpu_class") == gpu_class.name:
            requested = (details or {}).get("requested")
            amount = Fraction(str(requested)) if requested is not None else Fraction(0)
            open_hold = (job_id, at, amount)
    # A hold still open belongs to a job waiting now, unless it since finished.
    close(now)
    quota = Quota.objects.filter(team=team, gpu_class=gpu_class).first()
    use = quota_use([team.pk]).get((team.pk, gpu_class.pk), Fraction(0))
    return QuotaEvidence(
        window_days=EVIDENCE_WINDOW.days,
        waited_gpu_hours=_decimal(total, "0.01"),
        waiting_jobs=len(jobs),
        nominal=quota.nominal if quota else Decimal(0),
        borrowing_limit=quota.borrowing_limit if quota else Decimal(0),
        in_use=_decimal(use),
        held_back=held_back([team.pk]).get((team.pk, gpu_class.name), []),
    )


def quota_requests_for(user: Any) -> QuerySet[QuotaRequest]:
    """Requests a user may read: all for an admin, their teams' for a member."""
    requests = QuotaRequest.objects.select_related(
        "team", "gpu_class", "requested_by", "decided_by"
    )
    if is_admin(user):
        return requests
    return requests.filter(team__members=user)


# --- Audit log -----------------------------------------------------------------------------------

AUDITED_MODELS = (
    "gpuclass",
    "capabilityclass",
    "team",
    "quota",
    "queue",
    "reservation",
    "ratecard",
    "ratecardweight",
    "fairsharesettings",
    "quotarequest",
    "node",
    "rolegroups",
    "teamwebhook",
    # auth's user: the roles a login's identity-provider groups gave or took
    "user",
)


def audit_entries(
    *, source: str = "", model: str = "", actor: str = "", search: str = ""
) -> QuerySet[LogEntry]:
    """The audit log, newest first, filtered by source, kind of object, who, and object name."""
    types = ContentType.objects.filter(app_label__in=("queues", "auth"), model__in=AUDITED_MODELS)
    entries = LogEntry.objects.filter(content_type__in=types).select_related(
        "actor", "content_type"
    )
    if source:
        entries = entries.filter(additional_data__source=source)
    if model:
        entries = entries.filter(content_type__model=model)
    if actor:
        entries = entries.filter(actor__username=actor)
    if search:
        entries = entries.filter(object_repr__icontains=search)
    return entries.order_by("-timestamp", "-id")


def audit_changes(entry: LogEntry) -> list[tuple[str, str, str]]:
    """(field, old, new) of one entry; many-to-many changes as added/removed names."""
    rows = []
    for name, change in (entry.changes_dict or {}).items():
        if name == "id":
            continue
        if isinstance(change, dict):
            objects = ", ".join(str(o) for o in change.get("objects", []))
            if change.get("operation") == "add":
                rows.append((name, "", f"+ {objects}"))
            elif change.get("operation") == "delete":
                rows.append((name, f"- {objects}", ""))
            else:
                rows.append((name, "", f"{change.get('operation', '')} {objects}".strip()))
        else:
            old, new = change if len(change) == 2 else ("", change)
            rows.append((name, _audit_value(entry, name, old), _audit_value(entry, name, new)))
    return rows


def _audit_value(entry: LogEntry, name: str, raw: Any) -> str:
    """A value as the audit stored it (text), as people read it: a related object by its name,
    not its id ("ada", not "13"); a time to the second in UTC, as people write it
    ("2026-12-05 23:50:12 UTC", not an ISO instant with microseconds)."""
    if raw in (None, "None", ""):
        return ""
    text = str(raw)
    model = entry.content_type.model_class() if entry.content_type_id else None
    try:
        field = model._meta.get_field(name) if model is not None else None
    except FieldDoesNotExist:
        field = None
    if field is not None and field.many_to_one and field.related_model is not None:
        related = field.related_model._default_manager.filter(pk=text).first()
        return str(related) if related is not None else f"#{text} (deleted)"
    if isinstance(field, DateTimeField):
        try:
            return f"{datetime.fromisoformat(text).astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        except ValueError:
            return text
    return text


# --- Nodes ---------------------------------------------------------------------------------------


def class_capacity(gpu_class: GpuClass) -> tuple[Fraction, int]:
    """GPU-equivalents the class's healthy nodes offer (MIG-cut ones their slices' shares), and
    how many nodes that is (0: the portal has seen none of the class yet)."""
    total, count = Fraction(0), 0
    for gpus, layout in Node.objects.filter(gpu_class=gpu_class, healthy=True).values_list(
        "gpu_count", "mig_layout"
    ):
        total += gpu_class.node_capacity(gpus, layout or {})
        count += 1
    return total, count


def nodes_by_selector(*, names: list[str], rack: str, gpu_class: str) -> QuerySet[Node]:
    """The nodes a drain names: by name, by rack, or every node of a GPU class."""
    nodes = Node.objects.select_related("gpu_class").order_by("name")
    selected = Q(pk__in=[])
    if names:
        selected |= Q(name__in=names)
    if rack:
        selected |= Q(rack=rack)
    if gpu_class:
        selected |= Q(gpu_class__name=gpu_class)
    return nodes.filter(selected)


@dataclass(frozen=True)
class DrainedJob:
    """A job running (or admitted) on a node a drain names, and what the drain does to it."""

    job: Job
    nodes: list[str]  # its nodes among the drained ones
    gpus: Fraction  # GPU-equivalents it holds now (its open usage), 0 before its pods run
    limit_ends: datetime | None  # its runtime limit's end (None: not started)
    stopped: bool  # the deadline comes before the job ends by its limit
    saved_at: datetime | None  # its last checkpoint in this run (None: none)
    lost_hours: Fraction  # hours of work since then (or since it started) at the deadline
    lost_gpu_hours: Fraction

    @property
    def gpus_held(self) -> Decimal:
        return gpu_amount(self.gpus)

    @property
    def lost_time(self) -> timedelta:
        return timedelta(seconds=int(self.lost_hours * 3600))

    @property
    def lost_gpu_hours_shown(self) -> Decimal:
        return Decimal(self.lost_gpu_hours.numerator) / Decimal(self.lost_gpu_hours.denominator)


def drain_impact(nodes: list[Node], *, deadline: datetime | None) -> list[DrainedJob]:
    """The jobs a drain of ``nodes`` reaches, by job id. Without a deadline none is stopped (new
    work only stays away). With one, a job whose runtime limit ends later is preempted at the
    deadline and loses the work since its last checkpoint (since its start without one)."""
    names = {n.name for n in nodes}
    jobs = [
        job
        for job in Job.objects.filter(state__in=GPU_HOLDING_STATES, terminating=False)
        .select_related("owner", "team", "queue")
        .order_by("id")
        if names & set(job.nodes)
    ]
    held: dict[int, Fraction] = defaultdict(Fraction)
    for job_id, devices, numerator, denominator in UsageInterval.objects.filter(
        job__in=jobs, ended_at__isnull=True
    ).values_list("job_id", "devices", "share_numerator", "share_denominator"):
        held[job_id] += devices * Fraction(numerator, denominator)
    impact = []
    for job in jobs:
        started = job.started_at
        limit_ends = started + job.runtime_limit if started else None
        stopped = deadline is not None and (limit_ends is None or limit_ends > deadline)
        saved_at = (
            job.last_checkpoint_at
            if job.last_checkpoint_at and started and job.last_checkpoint_at >= started
            else None
        )
        lost_hours = Fraction(0)
        if stopped and deadline is not None and started is not None:
            since = saved_at or started
            seconds = int(max(deadline - since, timedelta(0)).total_seconds())
            lost_hours = Fraction(seconds, 3600)
        impact.append(
            DrainedJob(
                job=job,
                nodes=sorted(names & set(job.nodes)),
                gpus=held[job.pk],
                limit_ends=limit_ends,
                stopped=stopped,
                saved_at=saved_at,
                lost_hours=lost_hours,
                lost_gpu_hours=lost_hours * held[job.pk],
            )
        )
    return impact


# --- Reservations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AffectedJob:
    job_id: int
    team: str
    queue: str
    before: str
    after: str


@dataclass(frozen=True)
class ReservationImpact:
    """What the engine's plan says changes if the reservation is saved as proposed."""

    preempted: list[AffectedJob]
    waits_longer: list[AffectedJob]

    @property
    def nobody(self) -> bool:
        return not self.preempted and not self.waits_longer


def reservation_impact(
    *, name: str, fields: dict[str, Any] | None, now: datetime
) -> ReservationImpact:
    """Plan the cluster as it is and again with reservation ``name`` as ``fields`` (None: ended),
    and list running work the second plan preempts that the first does not, and pending work
    that the second admits later (or no longer now)."""
    snapshot = dataclasses.replace(snapshot_build(now=now), probes=())
    existing = Reservation.objects.filter(name=name).values_list("pk", flat=True).first()
    others = tuple(r for r in snapshot.reservations if r.id != existing)
    proposed = others
    if fields is not None:
        proposed = (
            *others,
            engine.Reservation(
                id=existing if existing is not None else -1,
                name=name,
                team=fields["team"],
                gpu_class=fields["gpu_class"],
                amount=Fraction(str(fields["amount"])),
                queue=fields["queue"],
                start=fields["starts_at"],
                end=fields["ends_at"],
            ),
        )
    before = engine.plan(snapshot)
    after = engine.plan(dataclasses.replace(snapshot, reservations=proposed))
    jobs = {
        j.pk: j
        for j in Job.objects.filter(
            state__in=(JobState.PENDING, JobState.ADMITTED, JobState.RUNNING)
        ).select_related("team", "queue")
    }

    def affected(job_id: int, was: str, becomes: str) -> AffectedJob | None:
        job = jobs.get(job_id)
        if job is None:
            return None
        return AffectedJob(job_id, job.team.name, job.queue.name, was, becomes)

    preempted_before = {p.job_id for p in before.preemptions}
    preempted = [
        a
        for p in after.preemptions
        if p.job_id not in preempted_before
        and (a := affected(p.job_id, "running", f"preempted: {p.reason}")) is not None
    ]
    waits = []
    admitted_before = {a.job_id for a in before.admissions}
    admitted_after = {a.job_id for a in after.admissions}

    def start_of(plan: engine.Plan, admitted: set[int], job_id: int) -> datetime | None:
        if job_id in admitted:
            return now
        status = plan.status(job_id)
        return status.estimated_start.at if status is not None else None

    waiting = sorted(admitted_before | {s.job_id for s in before.pending})
    for job_id in waiting:
        old_at = start_of(before, admitted_before, job_id)
        new_at = start_of(after, admitted_after, job_id)
        # Unknown (None) is later than any time.
        if old_at is None or (new_at is not None and new_at <= old_at):
            continue
        item = affected(job_id, _start_text(old_at, now), _start_text(new_at, now))
        if item is not None:
            waits.append(item)
    return ReservationImpact(
        preempted=preempted, waits_longer=sorted(waits, key=lambda a: a.job_id)
    )


def _start_text(at: datetime | None, now: datetime) -> str:
    return "starts now" if at == now else f"starts {_when(at)}"


def _when(at: datetime | None) -> str:
    """As reasons say a time (``2026-12-05 14:00 UTC``; pages show it in the viewer's zone)."""
    return time_text(at) if at is not None else "at an unknown time (never, as things are)"


@dataclass(frozen=True)
class Timeline:
    gpu_class: str
    times: list[datetime]
    reserved: list[Decimal]
    capacity: int
    quotas: Decimal

    @property
    def peak(self) -> Decimal:
        return max(self.reserved, default=Decimal(0))


TIMELINE_WEEKS = 8


def reservation_timelines(*, now: datetime) -> list[Timeline]:
    """Per GPU class, reserved GPU-equivalents as a step function from ``now`` over the coming
    weeks, beside the class's healthy capacity and its nominal quotas."""
    horizon = now + timedelta(weeks=TIMELINE_WEEKS)
    capacity: dict[str, int] = defaultdict(int)
    for name, gpus in Node.objects.filter(healthy=True, gpu_class__isnull=False).values_list(
        "gpu_class__name", "gpu_count"
    ):
        capacity[name] += gpus
    quotas: dict[str, Decimal] = defaultdict(Decimal)
    for name, nominal in Quota.objects.filter(team__active=True).values_list(
        "gpu_class__name", "nominal"
    ):
        quotas[name] += nominal
    windows: dict[str, list[tuple[Decimal, datetime | None, datetime | None]]] = defaultdict(list)
    for name, amount, start, end in Reservation.objects.active().values_list(
        "gpu_class__name", "amount", "starts_at", "ends_at"
    ):
        windows[name].append((amount, start, end))
    timelines = []
    for gpu_class in GpuClass.objects.active().order_by("name"):
        mine = windows.get(gpu_class.name, [])
        edges = {now, horizon}
        for _, start, end in mine:
            for edge in (start, end):
                if edge is not None and now < edge < horizon:
                    edges.add(edge)
        times = sorted(edges)
        reserved = [
            sum(
                (a for a, s, e in mine if (s is None or s <= t) and (e is None or t < e)),
                Decimal(0),
            )
            for t in times
        ]
        timelines.append(
            Timeline(
                gpu_class=gpu_class.name,
                times=times,
                reserved=reserved,
                capacity=capacity.get(gpu_class.name, 0),
                quotas=quotas.get(gpu_class.name, Decimal(0)),
            )
        )
    return timelines


def timeline_figure(timeline: Timeline) -> dict[str, Any]:
    """The timeline as a plotly figure (data, layout, config) for static/portal/charts.js."""
    import plotly.graph_objects as go

    x = [t.isoformat() for t in timeline.times]
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=x,
            y=[float(v) for v in timeline.reserved],
            name="reserved",
            mode="lines",
            line_shape="hv",
            fill="tozeroy",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=[x[0], x[-1]],
            y=[timeline.capacity] * 2,
            name="healthy capacity",
            mode="lines",
            line={"dash": "dash"},
        )
    )
    figure.add_trace(
        go.Scatter(
            x=[x[0], x[-1]],
            y=[float(timeline.quotas + timeline.peak)] * 2,
            name="quotas + peak reserved",
            mode="lines",
            line={"dash": "dot"},
        )
    )
    figure.update_layout(
        height=240,
        margin={"l": 40, "r": 10, "t": 30, "b": 30},
        title={"text": timeline.gpu_class, "x": 0},
        legend={"orientation": "h", "y": -0.25},
        yaxis={"title": "GPUs", "rangemode": "tozero"},
    )
    # Drawn by static/portal/charts.js from this JSON: no inline script (the CSP allows none).
    drawn: dict[str, Any] = json.loads(figure.to_json())
    drawn["config"] = {"displayModeBar": False}
    return drawn
