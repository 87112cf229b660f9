"""Acting on the engine's plan: store every pending job's reasons and estimates, admit and
preempt, and create or delete the Kubernetes Jobs."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, CharField, Value, When

from portal.tokens import job_token
from queues import admission as engine
from queues.admission.reasons import span_text
from queues.cluster.adapter import Cluster, ClusterRejected, ClusterUnreachable
from queues.cluster.manifests import LaunchSpec, job_manifest, job_name
from queues.cluster.secrets import env_of_json
from queues.models import (
    GPU_HOLDING_STATES,
    EventKind,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Queue,
    QueueEstimate,
    Team,
)
from queues.reconcile.facts import ClusterView, CycleReport
from queues.reconcile.jobs import TERMINATING_STATES, job_transition, transition_log
from queues.reconcile.leases import lease_acquire
from queues.reconcile.rows import update_from_rows

logger = logging.getLogger(__name__)

# Creates the cluster refuses (4xx) before the job ends failed with the API's message.
MAX_CREATE_REFUSALS = 3
# Up to this many waiting jobs every one's reasons, positions and estimates are refreshed by
# every cycle that starts REASONS_EVERY or more after the last refresh ended (issue #30; see
# ``refresh_begin``); beyond, those already shown are refreshed REASONS_REFRESH to
# REASONS_REFRESH_MAX apart, by the refresh's cost.
REASONS_ALL_UP_TO = 10_000
REASONS_EVERY = timedelta(seconds=2)
REASONS_EVERY_LEASE = "pending-reasons-every"
# Up to this many waiting jobs every cycle plans once, with the estimates, and admits from that
# plan; beyond, the forecast costs enough (0.1 s or more) that the admissions are planned
# without it and go to the cluster first, and the plan with it follows for the reasons.
FORECAST_FIRST_UP_TO = 500
REASONS_REFRESH = timedelta(seconds=5)
REASONS_REFRESH_MAX = timedelta(seconds=60)
REASONS_SHARE = 20
REASONS_LEASE = "pending-reasons-refresh"


def plan_store_reasons(plan: engine.Plan, *, now: datetime) -> None:
    """Store every pending job's reasons, estimated start and position (changed rows only),
    and the reasons of admitted jobs that wait."""
    pending_reasons_store(plan, now=now)
    admitted_reasons_store(plan)


@dataclasses.dataclass
class Refresh:
    """Whether a cycle refreshes every waiting job's reasons, positions and estimates (and so
    runs the engine's forecast, most of a plan's cost with thousands waiting) or only gives
    reasons to the jobs that show none yet. ``cost`` adds up the seconds the refresh took."""

    full: bool
    holder: str = ""  # the refresh lease's holder, when this cycle took it
    cost: float = 0.0
    lease: str = REASONS_LEASE  # which: paced by the cost, or REASONS_EVERY_LEASE

    @property
    def after(self) -> bool:
        """Whether its forecast comes after the admissions went to the cluster: a refresh
        paced by a lease (past ``FORECAST_FIRST_UP_TO`` waiting) is one."""
        return bool(self.holder)


def refresh_begin(waiting: int) -> Refresh:
    """Whether this cycle refreshes every waiting job's reasons, positions and estimates.

    Up to ``FORECAST_FIRST_UP_TO`` (500) waiting jobs every cycle does, with one plan that has
    the estimates. Up to ``REASONS_ALL_UP_TO`` (10,000) every cycle does that starts
    ``REASONS_EVERY`` (2 s) or more after the last refresh ended (a lease says when;
    ``refresh_end``), with a plan without the estimates for the admissions, sent to the
    cluster first, and then the same snapshot's plan with them (``Refresh.after``): every
    beat's cycle on a quiet cluster, and under churn, when cycles run back to back as pods
    end, one in every 2 s and the refresh's own time: refreshing thousands of rows in every
    cycle cost the Kueue replay a sixth of its throughput (docs/benchmarks.md), and a refresh
    holds up the admissions of the GPUs given back while it runs, so cycles without one
    always come between. Past 10,000 the jobs that already show reasons are refreshed only
    now and then, every ``REASONS_REFRESH``, or, when a refresh took long, after
    ``REASONS_SHARE`` times as long as it took, up to ``REASONS_REFRESH_MAX``
    (``refresh_end``). Between refreshes only the jobs that show none yet (new, or back in
    the queue) get reasons, without an estimate until the next refresh."""
    if waiting <= FORECAST_FIRST_UP_TO:
        return Refresh(full=True)
    holder = uuid.uuid4().hex
    if waiting <= REASONS_ALL_UP_TO:
        if lease_acquire(name=REASONS_EVERY_LEASE, holder=holder, ttl=REASONS_EVERY):
            return Refresh(full=True, holder=holder, lease=REASONS_EVERY_LEASE)
        return Refresh(full=False)
    if lease_acquire(name=REASONS_LEASE, holder=holder, ttl=REASONS_REFRESH):
        return Refresh(full=True, holder=holder)
    return Refresh(full=False)


def refresh_end(refresh: Refresh) -> None:
    """The next refresh's lease, from now: ``REASONS_EVERY`` after this one ended up to
    ``REASONS_ALL_UP_TO`` waiting, beyond by its cost (``refresh_pause``)."""
    if refresh.holder:
        every = refresh.lease == REASONS_EVERY_LEASE
        ttl = REASONS_EVERY if every else refresh_pause(refresh.cost)
        lease_acquire(name=refresh.lease, holder=refresh.holder, ttl=ttl)


def refresh_pause(cost: float) -> timedelta:
    """How long after a refresh that took ``cost`` seconds the next one comes."""
    return min(max(REASONS_REFRESH, REASONS_SHARE * timedelta(seconds=cost)), REASONS_REFRESH_MAX)


def new_pending_ids() -> set[int]:
    """The waiting jobs that show no reasons yet (new, or back in the queue): the ones a cycle
    between refreshes gives reasons to."""
    return set(
        Job.objects.filter(state=JobState.PENDING, position__isnull=True).values_list(
            "pk", flat=True
        )
    )


def pending_reasons_store(
    plan: engine.Plan, *, now: datetime, refresh: Refresh | None = None
) -> None:
    """Store the pending jobs' reasons, estimated start and position (changed rows only): all
    of them, or with ``refresh`` not full only those that show none yet (see
    ``refresh_begin``; without ``refresh`` this decides, and ends it)."""
    started = time.monotonic()
    statuses = {s.job_id: s for s in plan.pending}
    own = refresh is None
    if refresh is None:
        refresh = refresh_begin(len(statuses))
    fields = [
        "pending_reasons",
        "estimated_start",
        "likely_start",
        "start_range_low",
        "start_range_high",
        "estimated_start_note",
        "position",
        "queue_length",
        "planned_nodes",
    ]
    planned = {job_id: nodes.to_dict() for job_id, nodes in plan.planned_nodes}
    # Every pending job the plan saw (one submitted since is not in it yet); no list of ids:
    # at 15,000 waiting jobs the IN list alone cost seconds to send.
    current = Job.objects.filter(state=JobState.PENDING)
    if not refresh.full:
        current = current.filter(position__isnull=True)
    # plain values, not model instances: a full refresh of thousands spent a third of its
    # time building instances
    changed: dict[int, dict[str, Any]] = {}
    events: list[JobEvent] = []
    for job_id, *stored in current.order_by().values_list("id", *fields):
        status = statuses.get(job_id)
        if status is None:
            continue
        reasons = [r.to_dict() for r in status.reasons]
        quota_event = _quota_event(job_id, stored[0], reasons, now=now)
        if quota_event is not None:
            events.append(quota_event)
        estimate = status.estimated_start
        # a bound shown is kept (``bound_kept``); a projection is no bound, shown or new
        shown = None if stored[5] == engine.PROJECTED_NOTE else stored[1]
        values = (
            reasons,
            estimate.at if estimate.projected else engine.bound_kept(shown, estimate.at, now),
            estimate.likely,
            estimate.range_low,
            estimate.range_high,
            estimate.note[:300],
            status.position,
            status.queue_length,
            planned.get(job_id, {}),
        )
        if list(values) != stored:
            changed[job_id] = dict(zip(fields, values, strict=True))
    pending_rows_update(changed, fields)
    JobEvent.objects.bulk_create(events)
    refresh.cost += time.monotonic() - started
    if own:
        refresh_end(refresh)


def admitted_reasons_store(plan: engine.Plan) -> None:
    """Why each admitted job that the plan says still waits does (its reasons)."""
    for job_id, admitted_reasons in plan.admitted_reasons:
        Job.objects.filter(pk=job_id, state=JobState.ADMITTED).update(
            pending_reasons=[r.to_dict() for r in admitted_reasons]
        )


def pending_rows_update(rows: dict[int, dict[str, Any]], fields: list[str]) -> None:
    """Write each job id's ``{field: value}`` of ``rows`` (the same ``fields`` for all) where
    the job is still pending: on PostgreSQL in one statement whose one parameter is every row
    as JSON (``jsonb_to_recordset``), elsewhere one parameterized UPDATE per row. With a
    thousand jobs waiting, positions and estimates move for most of them every cycle;
    ``bulk_update`` spent ~10 s building its CASE expressions for as many rows. A job that left
    ``pending`` meanwhile (a cancellation) keeps what it has."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        update_from_rows(Job, rows, where={"state": JobState.PENDING.value})
        return
    meta = Job._meta
    concrete = {f.name: f for f in meta.concrete_fields}
    columns = [concrete[name] for name in fields]
    quote = connection.ops.quote_name
    names = {c.name: quote(c.column or c.name) for c in columns}
    table, pk, state = quote(meta.db_table), quote("id"), quote("state")
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET "
            + ", ".join(f"{names[c.name]} = %s" for c in columns)
            + f" WHERE {pk} = %s AND {state} = %s",
            [
                [c.get_db_prep_save(values[c.name], connection) for c in columns]
                + [job_id, JobState.PENDING.value]
                for job_id, values in rows.items()
            ],
        )


def _quota_event(
    job_id: int, before: list[dict[str, Any]], after: list[dict[str, Any]], *, now: datetime
) -> JobEvent | None:
    """A timeline entry when the binding reason turns ``QuotaExceeded`` or stops being it (while
    the job still waits): how long a team's jobs waited on quota is evidence for a quota request.
    """
    was = _binding_quota(before)
    becomes = _binding_quota(after)
    if becomes is not None and (was is None or was["gpu_class"] != becomes["gpu_class"]):
        return JobEvent(
            job_id=job_id,
            at=now,
            kind=EventKind.QUOTA_HELD,
            message=after[0].get("message", ""),
            details={"gpu_class": becomes["gpu_class"], "requested": becomes.get("requested")},
        )
    if was is not None and becomes is None:
        code = after[0].get("code", "") if after else ""
        return JobEvent(
            job_id=job_id, at=now, kind=EventKind.QUOTA_RELEASED, message=f"now waiting on {code}"
        )
    return None


def quota_bound_classes(reasons: list[dict[str, Any]]) -> list[str]:
    """The GPU classes whose quota holds a job back, by its stored reasons: ``QuotaExceeded``'s
    class, or every class of a job that can never fit for want of quota (``NeverFits`` where no
    class allows enough). Quota requests and the admin's grid count from this one rule."""
    if not reasons:
        return []
    details = reasons[0].get("details") or {}
    code = reasons[0].get("code")
    if code == engine.ReasonCode.QUOTA_EXCEEDED:
        return [details["gpu_class"]] if details.get("gpu_class") else []
    most = details.get("most_entitled") or {}
    if code == engine.ReasonCode.NEVER_FITS and most and len(most) == len(details["gpu_classes"]):
        return sorted(most, key=lambda c: (-most[c], c))  # the quota closest to enough first
    return []


def _binding_quota(reasons: list[dict[str, Any]]) -> dict[str, Any] | None:
    classes = quota_bound_classes(reasons)
    if not classes:
        return None
    details = reasons[0].get("details") or {}
    requested = details.get("requested")
    if isinstance(requested, dict):
        requested = requested.get(classes[0])
    return {"gpu_class": classes[0], "requested": requested}


def plan_apply(plan: engine.Plan, *, now: datetime, report: CycleReport) -> None:
    """Admissions and preemptions become state changes, with the reasons of admitted jobs that
    wait. The pending jobs' reasons are stored after the cluster was acted on
    (``pending_reasons_store``): with a thousand jobs waiting they are most of the writes, and
    the Jobs of the admitted ones need not wait for them."""
    jobs = Job.objects.select_related("capability_class").in_bulk(
        [a.job_id for a in plan.admissions] + [p.job_id for p in plan.preemptions]
    )
    classes = {g.name: g for g in GpuClass.objects.all()}
    # One transaction, one commit: each change is still conditional on the state it leaves,
    # and a commit per admission (with its flush to disk) was most of this step's time.
    with transaction.atomic():
        _admit_and_preempt(plan, jobs, classes, now=now, report=report)
    admitted_reasons_store(plan)


def _admit_and_preempt(
    plan: engine.Plan,
    jobs: dict[int, Job],
    classes: dict[str, GpuClass],
    *,
    now: datetime,
    report: CycleReport,
) -> None:
    admitting = [
        (job, admission)
        for admission in plan.admissions
        if (job := jobs.get(admission.job_id)) is not None and job.state == JobState.PENDING
    ]
    if connection.vendor == "postgresql" and len(admitting) > 1:
        _admit_many(admitting, classes, now=now, report=report)
        admitting = []
    for job, admission in admitting:
        if job_transition(
            job,
            to=JobState.ADMITTED,
            kind=EventKind.ADMITTED,
            now=now,
            message=_admitted_message(admission),
            details=admission.to_dict(),
            gpu_class=classes[admission.gpu_class],
            nodes=list(admission.nodes),
            capacity_kind=admission.capacity.value,
            reservation_id=admission.reservation_id,
            admitted_at=now,
            mig_profile=_mig_profile(job),
            **ADMITTED_CLEARS,
        ):
            report.admitted.append(job.pk)
    for preemption in plan.preemptions:
        job = jobs.get(preemption.job_id)
        if job is None or job.state not in GPU_HOLDING_STATES:
            continue
        if job_transition(
            job,
            to=JobState.PREEMPTED,
            kind=EventKind.PREEMPTED,
            now=now,
            message=f"{preemption.reason}; its pods get {span_text(preemption.grace_period)} to "
            f"stop, about {int(preemption.lost_work.total_seconds() // 60)} min of work lost "
            "since its last checkpoint",
            details=preemption.to_dict(),
            terminating=True,
            preempted_for_id=preemption.for_job,
        ):
            report.preempted.append(job.pk)


# What admission clears on a job: what it showed while it waited. ``not_before``: a roll-back
# sets it again; a preemption before the start does not.
ADMITTED_CLEARS: dict[str, Any] = {
    "not_before": None,
    "pending_reasons": [],
    "position": None,
    "queue_length": None,
    "estimated_start": None,
    "likely_start": None,
    "start_range_low": None,
    "start_range_high": None,
    "estimated_start_note": "",
    "planned_nodes": {},
}


def _admitted_message(admission: engine.Admission) -> str:
    return (
        f"admitted on {admission.gpu_class} ({admission.capacity.value}) on "
        f"{', '.join(sorted(set(admission.nodes)))}"
    )


def _admit_many(
    admitting: list[tuple[Job, engine.Admission]],
    classes: dict[str, GpuClass],
    *,
    now: datetime,
    report: CycleReport,
) -> None:
    """``job_transition`` to admitted for many jobs at once (PostgreSQL): one conditional
    UPDATE from the rows as JSON, returning the jobs it moved, and their events in one insert.
    Each job still moves only from ``pending``, once: a job cancelled meanwhile stays
    cancelled. Hundreds of admissions a cycle under churn cost a statement pair each before."""
    moved = update_from_rows(
        Job,
        {
            job.pk: {
                "state": JobState.ADMITTED.value,
                "admitted_at": now,
                "gpu_class": classes[admission.gpu_class].pk,
                "nodes": list(admission.nodes),
                "capacity_kind": admission.capacity.value,
                "reservation": admission.reservation_id,
                "mig_profile": _mig_profile(job),
                **ADMITTED_CLEARS,
            }
            for job, admission in admitting
        },
        where={"state": JobState.PENDING.value},
    )
    done = [(job, admission) for job, admission in admitting if job.pk in moved]
    JobEvent.objects.bulk_create(
        JobEvent(
            job_id=job.pk,
            at=now,
            kind=EventKind.ADMITTED,
            message=_admitted_message(admission),
            details=admission.to_dict(),
        )
        for job, admission in done
    )
    for job, admission in done:
        transition_log(
            job.pk, job.state, JobState.ADMITTED, EventKind.ADMITTED, _admitted_message(admission)
        )
        job.state = JobState.ADMITTED
        report.admitted.append(job.pk)


def _mig_profile(job: Job) -> str:
    return job.mig_profile or job.capability_class.mig_profile


def with_default_probes(snapshot: engine.Snapshot) -> engine.Snapshot:
    """Add one probe per queue and team that may use it: the queue's default job, whose
    estimated start is the queue's published expected wait for that team."""
    probes: list[engine.PendingJob] = []
    for queue in snapshot.queues:
        if not queue.teams:
            continue
        # The queue's default job is the same for every team but for the team: chosen once
        # (2,000 teams in Kueue's large-scale replay made it most of a second per plan).
        probe = engine.default_probe(
            queue,
            queue.teams[0],
            snapshot.now,
            0,
            gpu_classes=snapshot.gpu_classes,
            capability_classes=snapshot.capability_classes,
        )
        if probe is None:
            continue
        for team in queue.teams:
            probes.append(dataclasses.replace(probe, id=len(probes) + 1, team=team))
    return dataclasses.replace(snapshot, probes=tuple(probes))


def queue_estimates_store(snapshot: engine.Snapshot, plan: engine.Plan, *, now: datetime) -> None:
    estimates = dict(plan.probe_estimates)
    queues = dict(Queue.objects.values_list("name", "pk"))
    teams = dict(Team.objects.values_list("name", "pk"))
    rows = [
        QueueEstimate(
            queue_id=queues[probe.queue],
            team_id=teams[probe.team],
            estimated_start=estimates[probe.id].at,
            likely_start=estimates[probe.id].likely or estimates[probe.id].at,
            note=estimates[probe.id].note[:300],
            computed_at=now,
        )
        for probe in snapshot.probes
        if probe.id in estimates and probe.queue in queues and probe.team in teams
    ]
    with transaction.atomic():
        QueueEstimate.objects.all().delete()
        QueueEstimate.objects.bulk_create(rows)


def cluster_apply(
    cluster: Cluster, view: ClusterView, *, now: datetime, report: CycleReport
) -> None:
    """Send the creates of admitted jobs' Jobs and delete those of jobs that are ending. A job
    admitted by preemption waits until its victims' pods are gone: their GPUs are its, but not
    free yet. The creates are answered in the background (``CREATE_CONCURRENCY`` at a time)
    while the cycle goes on with what is for reading; ``creates_note`` notes their answers."""
    to_create = (
        Job.objects.filter(state=JobState.ADMITTED, k8s_job_name="")
        .select_related("team", "queue", "gpu_class")
        .order_by("id")
    )
    waiting = _waiting_for_victims([job.pk for job in to_create])
    todo: list[tuple[Job, dict[str, Any]]] = []
    # The jobs holding the most GPUs first: while a cycle's hundreds of creates go out, the
    # GPUs of those still waiting for theirs sit idle.
    sent = creates_in_flight()
    for job in sorted(to_create, key=lambda j: (-j.pods * j.gpus_per_pod, j.pk)):
        if job.pk in sent:
            continue  # an earlier cycle's create, not answered yet
        if job.pk in waiting:
            _note_waiting_for_victims(job, waiting[job.pk])
        else:
            todo.append((job, job_manifest(launch_spec(job))))
    refused = _ensure_namespaces(cluster, sorted({job.team.namespace for job, _ in todo}))
    for job, _ in todo:
        if job.team.namespace in refused:
            _create_refused(job, refused[job.team.namespace], now=now, report=report)
    todo = [item for item in todo if item[0].team.namespace not in refused]
    if todo:
        _UNNOTED.append(JobCreates(todo, _create_jobs(cluster, todo), now))
    try:
        _ending_delete(cluster, view, report=report)
    except ClusterUnreachable:
        creates_note(report, wait=True)  # what was created is noted all the same
        raise


def _ending_delete(cluster: Cluster, view: ClusterView, *, report: CycleReport) -> None:
    """Delete the Jobs of jobs that are ending, and the pods a Job left behind."""
    ending = Job.objects.filter(state__in=TERMINATING_STATES, terminating=True).select_related(
        "team", "queue"
    )
    pods_of = view.pods_of()
    for job in ending:
        if job.pk in view.jobs:
            deleted = cluster.delete_job(job.team.namespace, job_name(job.pk))
            report.jobs_deleted += int(deleted)
            name = f"{job.team.namespace}/{job_name(job.pk)}"
            logger.info(
                "job %s: Kubernetes Job %s %s",
                job.pk,
                name,
                "deleted" if deleted else "already gone",
                extra={"job_id": job.pk, "cluster_object": f"jobs.batch/{name}"},
            )
            continue
        # The Job is gone but its pods run on: deleted without cascading (kubectl's default for
        # a batch/v1 Job is to orphan them). They hold GPUs until they stop: stop them.
        grace = int(job.queue.termination_grace.total_seconds())
        for pod in pods_of.get(job.pk, []):
            if pod.deleted_at is None:
                report.orphans_deleted += int(
                    cluster.delete_pod(pod.namespace, pod.name, grace_seconds=grace)
                )
                logger.info(
                    "job %s: orphaned pod %s/%s deleted",
                    job.pk,
                    pod.namespace,
                    pod.name,
                    extra={"job_id": job.pk, "cluster_object": f"pods/{pod.namespace}/{pod.name}"},
                )


# Job creates in flight at once: a cycle that admits hundreds of jobs spends most of its
# cluster time waiting on one answer at a time; the API server takes several at once. (In the
# Kueue baseline replay 8 rather than 4 took a fifth off the time a cycle's 600 creates are
# answered in; the client's connection pool keeps 10 connections per host.)
CREATE_CONCURRENCY = 8
# Two pools: the Jobs' creates, and the namespaces a cycle makes before its creates, which
# must not wait behind an earlier cycle's creates still in flight (``creates_note``).
_POOLS: dict[str, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _creator(name: str = "job-create") -> ThreadPoolExecutor:
    with _POOLS_LOCK:
        if name not in _POOLS:
            _POOLS[name] = ThreadPoolExecutor(CREATE_CONCURRENCY, thread_name_prefix=name)
        return _POOLS[name]


def _ensure_namespaces(cluster: Cluster, namespaces: list[str]) -> dict[str, ClusterRejected]:
    """Make sure each namespace exists; those the cluster refuses, with why. The first is made
    alone (it lists them all once), the rest ``CREATE_CONCURRENCY`` at a time: the first jobs of
    2,000 teams (Kueue's large-scale replay) made 2,000 creates one after another. An
    unreachable cluster raises, as a create would."""

    def ensure(namespace: str) -> ClusterRejected | None:
        try:
            cluster.ensure_namespace(namespace)
        except ClusterRejected as exc:
            return exc
        return None

    outcomes = [ensure(namespace) for namespace in namespaces[:1]]
    if len(namespaces) > 1:
        outcomes += _creator("namespace-create").map(ensure, namespaces[1:])
    return {ns: exc for ns, exc in zip(namespaces, outcomes, strict=True) if exc is not None}


def _create_jobs(cluster: Cluster, todo: list[tuple[Job, dict[str, Any]]]) -> list[Future[Any]]:
    """Send each manifest's create, ``CREATE_CONCURRENCY`` at a time (HTTP only: the threads
    touch no database); each future's outcome, in ``todo``'s order: created (True), already ours
    (False), or the error. Once the cluster is unreachable, the creates not yet sent are not
    sent (they come out unreachable too); the next cycle makes them (a create is idempotent)."""
    down = threading.Event()
    creator = _creator()
    return [creator.submit(_create_one, cluster, manifest, down) for _, manifest in todo]


@dataclasses.dataclass
class JobCreates:
    """The creates a cycle sent (``cluster_apply``), their answers still to come."""

    todo: list[tuple[Job, dict[str, Any]]]
    outcomes: list[Future[Any]]
    now: datetime  # the sending cycle's
    left: list[int] = dataclasses.field(default_factory=list)  # indexes not noted yet

    def __post_init__(self) -> None:
        self.left = list(range(len(self.todo)))

    def note(self, report: CycleReport, *, wait: bool) -> ClusterUnreachable | None:
        """Note the answers in (all of them with ``wait``, else those already in): the Job's
        name for each created (or already ours), the refusals on their jobs, counted in
        ``report``; the cluster's being unreachable if an answer said so."""
        created_names: list[tuple[int, str]] = []
        unreachable: ClusterUnreachable | None = None
        left: list[int] = []
        try:
            for index in self.left:
                future = self.outcomes[index]
                if not wait and not future.done():
                    left.append(index)
                    continue
                job, manifest = self.todo[index]
                outcome = future.result()
                if isinstance(outcome, ClusterRejected):
                    _create_refused(job, outcome, now=self.now, report=report)
                    continue
                if isinstance(outcome, ClusterUnreachable):
                    unreachable = unreachable or outcome
                    continue
                report.jobs_created += int(outcome)
                name = manifest["metadata"]["name"]
                created_names.append((job.pk, name))
                logger.info(
                    "job %s: Kubernetes Job %s/%s %s",
                    job.pk,
                    job.team.namespace,
                    name,
                    "created" if outcome else "already existed",
                    extra={
                        "job_id": job.pk,
                        "cluster_object": f"jobs.batch/{job.team.namespace}/{name}",
                    },
                )
        finally:
            self.left = left
            # The names of the Jobs created, in a statement per 500 (also when the cluster
            # stopped answering halfway); a crash before it loses nothing: the next cycle's
            # create finds its own Job, which is success.
            for start in range(0, len(created_names), 500):
                chunk = created_names[start : start + 500]
                Job.objects.filter(
                    pk__in=[job_id for job_id, _ in chunk],
                    state=JobState.ADMITTED,
                    k8s_job_name="",
                ).update(
                    k8s_job_name=Case(
                        *(When(pk=job_id, then=Value(name)) for job_id, name in chunk),
                        output_field=CharField(),
                    )
                )
        return unreachable

    def in_flight(self) -> set[int]:
        """The jobs whose creates are not noted yet."""
        return {self.todo[index][0].pk for index in self.left}


# The creates this process sent and has not noted yet, oldest first: a cycle that another is
# already asked for leaves the answers still out to it (``creates_note``).
_UNNOTED: list[JobCreates] = []


def creates_note(report: CycleReport, *, wait: bool) -> ClusterUnreachable | None:
    """Note the answers of this process's creates that are in (all of them with ``wait``): the
    next cycle need not wait for the last of hundreds of creates to note the ends of the jobs
    created first. The cluster's being unreachable, if an answer said so."""
    unreachable = None
    try:
        for creates in list(_UNNOTED):
            found = creates.note(report, wait=wait)
            unreachable = unreachable or found
            if not creates.left:
                _UNNOTED.remove(creates)
    except BaseException:
        creates_forget()
        raise
    return unreachable


def creates_forget() -> None:
    """Leave the answers still out unnoted (a cycle failed): the next cycle sends those creates
    again and finds each Job there and its own, which is success."""
    _UNNOTED.clear()


def creates_in_flight() -> set[int]:
    """The jobs whose creates this process sent and has not noted yet (not to be sent again)."""
    return set().union(*(creates.in_flight() for creates in _UNNOTED))


def _create_one(
    cluster: Cluster, manifest: dict[str, Any], down: threading.Event
) -> bool | ClusterRejected | ClusterUnreachable:
    if down.is_set():
        return ClusterUnreachable("not sent: the cluster stopped answering")
    try:
        return cluster.create_job(manifest)
    except ClusterRejected as exc:
        return exc
    except ClusterUnreachable as exc:
        down.set()
        return exc


def _waiting_for_victims(job_ids: list[int]) -> dict[int, list[Job]]:
    """Of the admitted jobs ``job_ids``, those with a preempted job whose pods still stop."""
    waiting: dict[int, list[Job]] = {}
    for victim in Job.objects.filter(preempted_for_id__in=job_ids, terminating=True).select_related(
        "queue"
    ):
        assert victim.preempted_for_id is not None
        waiting.setdefault(victim.preempted_for_id, []).append(victim)
    return waiting


def _note_waiting_for_victims(job: Job, victims: list[Job]) -> None:
    names = ", ".join(str(v.pk) for v in victims)
    grace = max(v.queue.termination_grace for v in victims)
    reason = engine.PendingReason(
        engine.ReasonCode.INSUFFICIENT_CAPACITY,
        f"admitted by preempting job{'s' if len(victims) > 1 else ''} {names}: waiting for "
        f"their pods to stop (they get {span_text(grace)})",
        {"preempted_jobs": [v.pk for v in victims], "grace_seconds": int(grace.total_seconds())},
        "nothing to do: it starts as soon as they are gone",
    )
    Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
        pending_reasons=[reason.to_dict()]
    )


def launch_spec(job: Job) -> LaunchSpec:
    return LaunchSpec(
        job_id=job.pk,
        namespace=job.team.namespace,
        team=job.team.name,
        queue=job.queue.name,
        image=job.image,
        command=list(job.command),
        args=list(job.args),
        env=env_of_json(job.env),
        env_from=[str(s) for s in job.env_from],
        nodes=list(job.nodes),
        devices_per_pod=job.gpus_per_pod,
        mig_profile=job.mig_profile,
        cpu_millicores=job.cpu_millicores_per_pod,
        memory_mib=job.memory_mib_per_pod,
        runtime_limit=job.runtime_limit,
        grace_period=job.queue.termination_grace,
        job_token=job_token(job.pk),
        api_url=settings.PORTAL_URL,
        extra_pod_annotations=_sim_annotations(job),
    )


def _sim_annotations(job: Job) -> dict[str, str]:
    """Simulation-only annotations a job may carry in its environment (demo and tests)."""
    duration = job.env.get("SIM_DURATION_SECONDS")
    wanted = isinstance(duration, str) and duration
    return {"sim.gpuportal.io/duration-seconds": duration} if wanted else {}


def _create_refused(job: Job, exc: ClusterRejected, *, now: datetime, report: CycleReport) -> None:
    refusals = job.cluster_failures + 1
    if refusals < MAX_CREATE_REFUSALS:
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(cluster_failures=refusals)
        JobEvent.objects.create(
            job_id=job.pk,
            at=now,
            kind=EventKind.CLUSTER_REFUSED,
            message=f"the cluster refused the Job ({exc.status}): {exc.message}; will retry",
        )
        return
    if job_transition(
        job,
        to=JobState.FAILED,
        kind=EventKind.FAILED,
        now=now,
        message=f"the cluster refused the Job {refusals} times: {exc.message}",
        failure_reason=f"cluster refused: {exc.message}"[:300],
        cluster_failures=refusals,
        finished_at=now,
    ):
        report.transitions["admitted→failed"] += 1
