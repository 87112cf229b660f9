"""The one place notification events are found, and turned into deliveries.

Nothing that changes a job calls into notifications: the job timeline (``JobEvent``, which every
state change already writes in its own transaction) is read as an outbox, after it committed.
The collector reads the timeline past its cursor, the running jobs a drain will stop, and the
quota requests decided lately; for each event it adds one ``NotificationDelivery`` per person and
channel that wants it. The rows' unique key makes collecting twice harmless (a retried task, two
workers, the overlap below), so the collector may re-read rather than risk missing an event.

Who hears of a job: its owner, and the job's team's webhook (the team's channel, set by admins)
for the events it receives. No other person (a teammate, a person outside the team) is ever a
recipient of a job's events, and no other team's webhook. Events about a queue or a budget go to
admins and finance only.

Budgets are chargeback's: it records a budget's month whose spend reached the amount
(``BudgetOverrun``, once per budget and month); the collector reads those rows as it reads the
timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import F, Max, Min, OuterRef, Subquery
from django.db.models.functions import Coalesce

from portal.formatting import format_datetime, money_text
from portal.roles import admins_and_finance
from queues.jobs.selectors import job_drain_notice
from queues.models import (
    GPU_HOLDING_STATES,
    BudgetOverrun,
    BudgetScope,
    EventKind,
    Job,
    JobEvent,
    JobState,
    Node,
    NotificationChannel,
    NotificationCursor,
    NotificationDelivery,
    NotificationEstimate,
    NotificationEvent,
    Queue,
    QuotaRequest,
    QuotaRequestStatus,
)
from queues.notifications.preferences import events_wanted, recipients, team_hooks_wanting

CURSOR = "job-events"
# Timeline rows are numbered when inserted but seen when committed: one inserted earlier may
# commit after a later one was read. Re-reading this many ids behind the cursor catches it; the
# deliveries' unique key turns what was already collected into nothing.
OVERLAP = 500
# Quota decisions are looked for this far back (a collector that was down catches up).
DECISIONS_WINDOW = timedelta(days=2)
# A queue is news to admins once its longest wait is this far past its target.
PAST_TARGET_FOR = timedelta(hours=1)

KINDS = {
    EventKind.STARTED: NotificationEvent.JOB_STARTED,
    EventKind.SUCCEEDED: NotificationEvent.JOB_FINISHED,
    EventKind.FAILED: NotificationEvent.JOB_FAILED,
    EventKind.PREEMPTED: NotificationEvent.JOB_PREEMPTED,
}


@dataclass(frozen=True)
class Notice:
    """One event for people: its unique key, who may hear of it, and what they are told."""

    key: str
    event: str
    users: list[User]
    subject: str
    text: str
    details: dict[str, Any] = field(default_factory=dict)
    team_id: int | None = None  # a job's team, whose webhook may hear of it
    team_text: str = ""  # what the team's channel is told (it names the job's owner)
    at: datetime | None = None  # when it happened (a team hook hears only of what came after it)


def when(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC" if moment else "an unknown time"


def job_link(job_id: int) -> str:
    return f"{settings.PORTAL_URL}/jobs/{job_id}/" if settings.PORTAL_URL else ""


def _job_title(job: Job, *, owner: bool = False) -> str:
    """ "Job 812 (resnet)"; with ``owner``, "Job 812 (resnet) of mia" (for the team's channel)."""
    title = f"Job {job.pk}" + (f" ({job.name})" if job.name else "")
    return f"{title} of {job.owner.get_username()}" if owner else title


def job_notice(event: JobEvent, job: Job) -> Notice:
    """What a timeline entry tells the job's owner (and the team's channel)."""
    kind = KINDS[EventKind(event.kind)]
    where = f"queue {job.queue.name}, team {job.team.name}"

    def words(title: str) -> tuple[str, str]:
        if kind == NotificationEvent.JOB_STARTED:
            return f"{title} started", f"{title} started in {where}: {event.message}."
        if kind == NotificationEvent.JOB_FINISHED:
            return f"{title} finished", f"{title} in {where} succeeded: {event.message}."
        if kind == NotificationEvent.JOB_FAILED:
            return f"{title} failed", f"{title} in {where} failed: {event.message}."
        return (
            f"{title} was preempted",
            f"{title} in {where} was stopped and goes back to the queue: {event.message}.",
        )

    subject, text = words(_job_title(job))
    _, team_text = words(_job_title(job, owner=True))
    link = job_link(job.pk)
    return Notice(
        key=f"job:{job.pk}:{event.kind}:{event.pk}",
        event=kind.value,
        users=[job.owner],
        subject=subject,
        text=f"{text} {link}".strip(),
        details={
            "job": job.pk,
            "job_name": job.name,
            "owner": job.owner.get_username(),
            "team": job.team.name,
            "queue": job.queue.name,
            "state": event.kind,
            "at": format_datetime(event.at),
            "message": event.message,
            "url": link,
        },
        team_id=job.team_id,
        team_text=f"{team_text} {link}".strip(),
        at=event.at,
    )


def timeline_notices(
    *, after: int, start: int, wanted: set[str] | None = None
) -> tuple[list[Notice], int]:
    """Notices of the timeline entries past id ``after`` (minus the overlap, but never at or
    before ``start``, where the timeline was when notifications began), and the last id read;
    with ``wanted``, only of the events someone may receive (``events_wanted``: with nobody
    hearing of starts and ends, the tens of thousands of them a busy hour writes are not
    loaded)."""
    kinds = [kind for kind, event in KINDS.items() if wanted is None or event.value in wanted]
    events = list(
        JobEvent.objects.filter(pk__gt=max(after - OVERLAP, start), kind__in=kinds)
        .select_related("job__owner", "job__team", "job__queue")
        .order_by("pk")
    )
    last = JobEvent.objects.aggregate(last=Max("pk"))["last"] or 0
    return [job_notice(e, e.job) for e in events], max(last, after)


def drain_notices() -> list[Notice]:
    """Running jobs that a drain will stop before their runtime limit ends, once per job and
    deadline (a deadline moved is news again)."""
    drained = list(
        Node.objects.exclude(maintenance="")
        .filter(maintenance_deadline__isnull=False)
        .values_list("name", flat=True)
    )
    if not drained:
        return []
    notices = []
    jobs = Job.objects.filter(state__in=GPU_HOLDING_STATES, terminating=False).select_related(
        "owner", "team", "queue"
    )
    for job in jobs:
        if not set(job.nodes or []) & set(drained):
            continue
        notice = job_drain_notice(job)
        if notice is None or not notice.stopped or notice.deadline is None:
            continue
        lost = ""
        if job.checkpoint_interval:
            lost = (
                f" Work since its last checkpoint is lost then (it checkpoints every "
                f"{int(job.checkpoint_interval.total_seconds() // 60)} min)."
            )
        title = _job_title(job)
        text = (
            f"{title} runs on {', '.join(notice.nodes)}, which will be drained"
            + (f" ({notice.reason})" if notice.reason else "")
            + f": it will be stopped at {when(notice.deadline)}, before its runtime limit ends "
            f"at {when(notice.limit_ends)}.{lost} Save a checkpoint before then."
        )
        team_text = _job_title(job, owner=True) + text[len(title) :]
        link = job_link(job.pk)
        notices.append(
            Notice(
                key=f"job:{job.pk}:drain:{format_datetime(notice.deadline)}",
                event=NotificationEvent.JOB_DRAIN_AHEAD.value,
                users=[job.owner],
                subject=f"{title} will be stopped by a drain at {when(notice.deadline)}",
                text=f"{text} {link}".strip(),
                details={
                    "job": job.pk,
                    "nodes": notice.nodes,
                    "deadline": format_datetime(notice.deadline),
                    "reason": notice.reason,
                    "url": link,
                },
                team_id=job.team_id,
                team_text=f"{team_text} {link}".strip(),
            )
        )
    return notices


def start_later_notices(*, now: datetime, wanted: set[str] | None = None) -> list[Notice]:
    """Waiting jobs whose "at the latest" moved later than their owner last heard (or than
    when it was first known) by more than ``NOTIFICATION_START_LATER_MINUTES``. The first
    estimate of a job is remembered, not announced; after an announcement the new one is the
    mark. Jobs no longer waiting are forgotten. While nobody may receive it (``wanted``
    without it) nothing is remembered: once someone turns it on, the estimates then are the
    marks, and only moves after that are news."""
    if wanted is not None and NotificationEvent.JOB_START_LATER.value not in wanted:
        NotificationEstimate.objects.all().delete()
        return []
    threshold = timedelta(minutes=settings.NOTIFICATION_START_LATER_MINUTES)
    NotificationEstimate.objects.exclude(job__state=JobState.PENDING).delete()
    waiting = Job.objects.filter(state=JobState.PENDING, estimated_start__isnull=False)
    # In the database, not per job in Python: with thousands waiting the collector loaded every
    # waiting job whole every few seconds, and held up the reconcile sharing its worker.
    NotificationEstimate.objects.bulk_create(
        [
            NotificationEstimate(job_id=pk, estimated_start=at)
            for pk, at in waiting.filter(notified_estimate__isnull=True).values_list(
                "pk", "estimated_start"
            )
            if at is not None
        ],
        ignore_conflicts=True,
    )
    notices = []
    moved = list(
        waiting.filter(estimated_start__gt=F("notified_estimate__estimated_start") + threshold)
        .annotate(was=F("notified_estimate__estimated_start"))
        .select_related("owner", "team", "queue")
        .order_by("pk")
    )
    known = {job.pk: job.was for job in moved}
    for job in moved:
        assert job.estimated_start is not None
        before, after = known[job.pk], job.estimated_start
        title = _job_title(job)
        reason = (job.pending_reasons or [{}])[0].get("message", "")
        link = job_link(job.pk)
        text = (
            f"{title} in queue {job.queue.name} now starts at the latest {when(after)}, "
            f"{minutes_text(after - before)} later than {when(before)}"
            + (f": {reason}" if reason else "")
            + "."
        )
        team_text = _job_title(job, owner=True) + text[len(title) :]
        notices.append(
            Notice(
                key=f"job:{job.pk}:later:{format_datetime(after)}",
                event=NotificationEvent.JOB_START_LATER.value,
                users=[job.owner],
                subject=f"{title} starts later: at the latest {when(after)}",
                text=f"{text} {link}".strip(),
                details={
                    "job": job.pk,
                    "estimated_start": format_datetime(after),
                    "was": format_datetime(before),
                    "url": link,
                },
                team_id=job.team_id,
                team_text=f"{team_text} {link}".strip(),
            )
        )
        NotificationEstimate.objects.filter(job=job).update(estimated_start=after)
    return notices


def minutes_text(span: timedelta) -> str:
    minutes = int(span.total_seconds() // 60)
    hours, rest = divmod(minutes, 60)
    if hours and rest:
        return f"{hours} h {rest} min"
    return f"{hours} h" if hours else f"{rest} min"


def waiting_since() -> dict[int, datetime]:
    """Per queue with waiting jobs, since when its longest-waiting job waits: since it was
    submitted, or since it was last requeued (a preempted job that ran for hours has not waited
    all that time)."""
    requeued = (
        JobEvent.objects.filter(job=OuterRef("pk"), kind=EventKind.REQUEUED)
        .order_by("-at")
        .values("at")[:1]
    )
    rows = (
        Job.objects.filter(state=JobState.PENDING)
        .annotate(since=Coalesce(Subquery(requeued), F("submitted_at")))
        .values("queue_id")
        .annotate(oldest=Min("since"))
        .values_list("queue_id", "oldest")
    )
    return dict(rows)


def queue_notices(*, now: datetime) -> list[Notice]:
    """Queues whose longest-waiting job has waited an hour past the queue's wait target: the
    queue has been past its target for at least that hour. To admins and finance, once per queue
    and day."""
    staff = list(admins_and_finance())
    if not staff:
        return []
    notices = []
    since = waiting_since()
    for queue in Queue.objects.filter(pk__in=list(since)).order_by("name"):
        waited = now - since[queue.pk]
        if waited < queue.expected_wait_target + PAST_TARGET_FOR:
            continue
        waiting = Job.objects.filter(state=JobState.PENDING, queue=queue).count()
        text = (
            f"Queue {queue.name} is past its wait target of "
            f"{minutes_text(queue.expected_wait_target)}: its longest-waiting job has waited "
            f"{minutes_text(waited)}, and {waiting} job(s) wait."
        )
        link = f"{settings.PORTAL_URL}/queues/{queue.name}/" if settings.PORTAL_URL else ""
        notices.append(
            Notice(
                key=f"queue:{queue.name}:past-target:{now:%Y-%m-%d}",
                event=NotificationEvent.QUEUE_PAST_TARGET.value,
                users=staff,
                subject=f"Queue {queue.name} is past its wait target",
                text=f"{text} {link}".strip(),
                details={
                    "queue": queue.name,
                    "wait_target_seconds": int(queue.expected_wait_target.total_seconds()),
                    "longest_wait_seconds": int(waited.total_seconds()),
                    "pending": waiting,
                    "url": link,
                },
            )
        )
    return notices


def budget_notices(*, now: datetime) -> list[Notice]:
    """Budgets whose month's spend reached the amount (``BudgetOverrun``, recorded once per
    budget and month by chargeback), seen lately: to admins and finance, with the numbers."""
    overruns = list(BudgetOverrun.objects.filter(at__gte=now - DECISIONS_WINDOW).order_by("at"))
    staff = list(admins_and_finance()) if overruns else []
    notices = []
    for o in overruns if staff else []:
        label = "Team" if o.scope == BudgetScope.TEAM else "Cost center"
        percent = (o.spent * 100 / o.amount).quantize(Decimal("0.1"))
        month = f"{o.month:%Y-%m}"
        text = (
            f"{label} {o.name} is past its budget for {month}: {money_text(o.spent)} {o.currency} "
            f"spent of {money_text(o.amount)} {o.currency} ({percent} %), seen {when(o.at)}."
        )
        link = f"{settings.PORTAL_URL}/chargeback/?month={month}" if settings.PORTAL_URL else ""
        notices.append(
            Notice(
                key=f"budget:{o.scope}:{o.name}:{month}",
                event=NotificationEvent.BUDGET_EXCEEDED.value,
                users=staff,
                subject=f"{label} {o.name} is past its budget for {month}",
                text=f"{text} {link}".strip(),
                details={
                    "scope": o.scope,
                    "name": o.name,
                    "period": month,
                    "spent": str(o.spent),
                    "budget": str(o.amount),
                    "currency": o.currency,
                    "percent": str(percent),
                    "url": link,
                },
            )
        )
    return notices


def decision_notices(*, now: datetime) -> list[Notice]:
    """Quota requests decided lately, to the person who asked."""
    decided = QuotaRequest.objects.filter(
        status__in=[QuotaRequestStatus.APPROVED, QuotaRequestStatus.DECLINED],
        decided_at__gte=now - DECISIONS_WINDOW,
    ).select_related("requested_by", "team", "gpu_class", "decided_by")
    notices = []
    for request in decided:
        outcome = "approved" if request.status == QuotaRequestStatus.APPROVED else "declined"
        asked = f"nominal {request.nominal}, borrowing {request.borrowing_limit}"
        text = (
            f"Your quota request {request.pk} for team {request.team.name}, "
            f"{request.gpu_class.name} ({asked}) was {outcome}"
            + (f" by {request.decided_by.get_username()}" if request.decided_by else "")
            + (f": {request.decision_reason}" if request.decision_reason else ".")
        )
        link = f"{settings.PORTAL_URL}/quota-requests/{request.pk}/" if settings.PORTAL_URL else ""
        notices.append(
            Notice(
                key=f"quota-request:{request.pk}:{request.status}",
                event=NotificationEvent.QUOTA_REQUEST_DECIDED.value,
                users=[request.requested_by],
                subject=f"Quota request {request.pk} {outcome}",
                text=f"{text} {link}".strip(),
                details={"quota_request": request.pk, "status": request.status, "url": link},
            )
        )
    return notices


def _team_wants(hooks: dict[int, tuple[set[str], datetime | None]], notice: Notice) -> bool:
    """Whether the notice's team webhook receives it: its event is chosen, and it happened
    after the hook's URL or events last changed (what is current, drains ahead and later starts,
    has no ``at``)."""
    assert notice.team_id is not None
    events, since = hooks.get(notice.team_id, (set(), None))
    if notice.event not in events:
        return False
    return since is None or notice.at is None or notice.at > since


def notifications_collect(*, now: datetime) -> int:
    """Find what happened since the last collection and add a delivery for each person and
    channel that wants it; returns how many deliveries were new."""
    cursor, created = NotificationCursor.objects.get_or_create(name=CURSOR)
    wanted = events_wanted()
    if created:
        # The first collection: what the timeline holds from before notifications existed is
        # history, not news; the overlap never reads back past it.
        last = JobEvent.objects.aggregate(last=Max("pk"))["last"] or 0
        NotificationCursor.objects.filter(pk=cursor.pk).update(start=last)
        notices: list[Notice] = []
    else:
        notices, last = timeline_notices(after=cursor.position, start=cursor.start, wanted=wanted)
    notices += drain_notices() + start_later_notices(now=now, wanted=wanted)
    notices += decision_notices(now=now) + queue_notices(now=now) + budget_notices(now=now)
    known = set(
        NotificationDelivery.objects.filter(key__in=[n.key for n in notices]).values_list(
            "key", flat=True
        )
    )
    fresh = [n for n in notices if n.key not in known]
    reach = recipients([(n.users, n.event) for n in fresh])
    rows = [
        NotificationDelivery(
            key=notice.key,
            user=user,
            channel=channel,
            event=notice.event,
            subject=notice.subject[:300],
            text=notice.text,
            details=notice.details,
            created_at=now,
        )
        for notice, found in zip(fresh, reach, strict=True)
        for user, channel in found
    ]
    # The team's channel: a job's events that its team's webhook receives.
    hooks = team_hooks_wanting({n.team_id for n in fresh if n.team_id is not None})
    rows += [
        NotificationDelivery(
            key=notice.key,
            team_id=notice.team_id,
            channel=NotificationChannel.WEBHOOK,
            event=notice.event,
            subject=notice.subject[:300],
            text=notice.team_text or notice.text,
            details=notice.details,
            created_at=now,
        )
        for notice in fresh
        if notice.team_id is not None and _team_wants(hooks, notice)
    ]
    made = NotificationDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    # Only forward: two collectors racing never move the cursor back.
    NotificationCursor.objects.filter(pk=cursor.pk, position__lt=last).update(position=last)
    return len(made)
