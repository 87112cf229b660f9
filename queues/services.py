"""Every state change of the queues app. Services are keyword-only and named entity_action."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Exists, Model, ProtectedError, Q
from django.utils import timezone

from chargeback.models import RateCard, RateCardWeight
from queues.admission.asks import pods_held
from queues.models import (
    ACTIVE_JOB_STATES,
    CapabilityClass,
    FairShareSettings,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Lease,
    Node,
    Queue,
    QueueStats,
    Quota,
    Reservation,
    Team,
)
from queues.policy import (
    NAMED_SECTIONS,
    Policy,
    PolicyError,
    Problem,
    format_datetime,
    format_duration,
    load_policy_text,
    parse_policy,
    peak_reserved,
    policy_overlay,
)
from queues.selectors import policy_current

# --- Policy as code ------------------------------------------------------------------------------

SECTION_MODELS: dict[str, type[Model]] = {
    "gpu_classes": GpuClass,
    "capability_classes": CapabilityClass,
    "teams": Team,
    "queues": Queue,
    "reservations": Reservation,
}


@dataclass
class Change:
    section: str
    name: str
    action: str  # created | changed | reactivated | removed | deactivated | not in file
    fields: list[tuple[str, Any, Any]] = field(default_factory=list)
    note: str = ""


@dataclass
class PolicyReport:
    """What applying a policy did (or, for a dry run, would do)."""

    dry_run: bool
    changes: list[Change] = field(default_factory=list)
    users_created: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(c.action != "not in file" for c in self.changes) or bool(self.users_created)

    def render(self) -> str:
        symbols = {
            "created": "+",
            "changed": "~",
            "reactivated": "~",
            "removed": "-",
            "deactivated": "-",
            "not in file": "?",
        }
        lines: list[str] = []
        for change in self.changes:
            head = f"{symbols[change.action]} {change.section} {change.name}: {change.action}"
            if change.note:
                head += f" ({change.note})"
            lines.append(head)
            for name, old, new in change.fields:
                lines.append(f"    {name}: {display(old)} → {display(new)}")
        if self.users_created:
            lines.append(
                "users created without a usable password: " + ", ".join(self.users_created)
            )
        if not self.changed:
            lines.append("No changes: the database already matches the file.")
        if self.dry_run:
            lines.append("Dry run: nothing was written.")
        return "\n".join(lines)


def display(value: Any) -> str:
    """A policy value as people read it in a diff."""
    if value is None:
        return "—"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, datetime):
        return format_datetime(value)
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, list):
        return "[" + ", ".join(display(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


def diff_fields(
    old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = ""
) -> list[tuple[str, Any, Any]]:
    """Field-by-field differences, descending into nested mappings (quotas, weights)."""
    differences: list[tuple[str, Any, Any]] = []
    for key in sorted(
        set(old) | set(new), key=lambda k: (list(new).index(k) if k in new else 999, k)
    ):
        before, after = old.get(key), new.get(key)
        if isinstance(before, Mapping) or isinstance(after, Mapping):
            differences += diff_fields(before or {}, after or {}, f"{prefix}{key}.")
        elif before != after:
            differences.append((f"{prefix}{key}", before, after))
    return differences


def policy_apply(*, text: str, dry_run: bool = False, prune: bool = False) -> PolicyReport:
    """Make the database hold what the policy file ``text`` says; all or nothing.

    Raises ``PolicyError`` (nothing written) for an invalid file, a rate card rewrite, or quotas
    plus reservations promising more GPUs of a class than the cluster's healthy nodes have.
    Objects in the database that the file's sections do not name are reported and left alone;
    with ``prune`` they are deleted, or deactivated when jobs, usage or reservations still
    reference them.
    """
    current = policy_current()
    wanted = parse_policy(load_policy_text(text), existing=current)
    problems = _rate_card_rewrites(current, wanted)
    problems += _overcommitments(policy_overlay(current, wanted, prune=prune), now=timezone.now())
    if problems:
        raise PolicyError(problems)

    report = PolicyReport(dry_run=dry_run)
    with transaction.atomic():
        _write_policy(current, wanted, report)
        for section in reversed(NAMED_SECTIONS):
            if section not in wanted:
                continue
            for name in current[section]:
                if name in wanted[section]:
                    continue
                if prune:
                    report.changes.append(_prune(section, name))
                else:
                    report.changes.append(
                        Change(section, name, "not in file", note="left alone; --prune removes it")
                    )
        if "rate_cards" in wanted:
            for key in current["rate_cards"]:
                if key not in wanted["rate_cards"]:
                    report.changes.append(
                        Change(
                            "rate_cards", key, "not in file", note="rate cards are never removed"
                        )
                    )
        if dry_run:
            transaction.set_rollback(True)
    return report


def _rate_card_rewrites(current: Policy, wanted: Policy) -> list[Problem]:
    problems = []
    for key, card in wanted.get("rate_cards", {}).items():
        stored = current["rate_cards"].get(key)
        if stored is not None and diff_fields(stored, card):
            differences = ", ".join(
                f"{name} {display(old)} → {display(new)}"
                for name, old, new in diff_fields(stored, card)
            )
            problems.append(
                Problem(
                    f"rate_cards[{key}]",
                    None,
                    f"rate cards are never rewritten ({differences}); add a new card with a later "
                    "effective_from instead",
                )
            )
    return problems


def _overcommitments(result: Policy, *, now: datetime) -> list[Problem]:
    """Quotas plus peak reservations of each GPU class must fit its healthy capacity, if known."""
    capacity: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    product_to_class = {f["product"]: name for name, f in result["gpu_classes"].items()}
    for node in Node.objects.filter(healthy=True).select_related("gpu_class"):
        name = node.gpu_class.name if node.gpu_class else product_to_class.get(node.product)
        if name is not None:
            capacity[name] += node.gpu_count
            nodes[name] += 1
    problems = []
    for gpu_class in result["gpu_classes"]:
        if gpu_class not in capacity:
            continue
        quotas = sum(
            (
                t["quotas"][gpu_class]["nominal"]
                for t in result["teams"].values()
                if gpu_class in t["quotas"]
            ),
            Decimal(0),
        )
        reserved, peak_at = peak_reserved(
            [
                (r["amount"], r["starts_at"], r["ends_at"])
                for r in result["reservations"].values()
                if r["gpu_class"] == gpu_class
            ],
            now=now,
        )
        if quotas + reserved > capacity[gpu_class]:
            when = f" at {format_datetime(peak_at)}" if peak_at else ""
            problems.append(
                Problem(
                    f"gpu_classes[{gpu_class}]",
                    None,
                    f"quotas ({display(quotas)}) plus reservations ({display(reserved)}{when}) "
                    f"promise {display(quotas + reserved)} GPUs, but the cluster has "
                    f"{capacity[gpu_class]} on {nodes[gpu_class]} healthy node(s)",
                )
            )
    return problems


def _write_policy(current: Policy, wanted: Policy, report: PolicyReport) -> None:
    if "fair_share" in wanted:
        before = current.get("fair_share")
        half_life = wanted["fair_share"]["usage_half_life"]
        FairShareSettings.objects.update_or_create(pk=1, defaults={"usage_half_life": half_life})
        if before is None:
            report.changes.append(Change("fair_share", "settings", "created"))
        elif before != wanted["fair_share"]:
            report.changes.append(
                Change(
                    "fair_share", "settings", "changed", diff_fields(before, wanted["fair_share"])
                )
            )
    writers = {
        "gpu_classes": _write_gpu_class,
        "capability_classes": _write_capability_class,
        "teams": _write_team,
        "queues": _write_queue,
        "reservations": _write_reservation,
    }
    for section in NAMED_SECTIONS:
        for name, fields in wanted.get(section, {}).items():
            before = current[section].get(name)
            if before is not None and not diff_fields(before, fields):
                continue
            model = SECTION_MODELS[section]
            inactive = before is None and model.objects.filter(name=name).exists()
            writers[section](name, fields, report)
            if before is None:
                action = "reactivated" if inactive else "created"
                report.changes.append(Change(section, name, action))
            else:
                report.changes.append(Change(section, name, "changed", diff_fields(before, fields)))
    for key, card in wanted.get("rate_cards", {}).items():
        if key in current["rate_cards"]:
            continue
        rate_card = RateCard.objects.create(
            effective_from=card["effective_from"],
            currency=card["currency"],
            price_per_normalized_gpu_hour=card["price_per_normalized_gpu_hour"],
            note=card["note"],
        )
        gpu_classes = _by_name(GpuClass, card["weights"])
        RateCardWeight.objects.bulk_create(
            RateCardWeight(rate_card=rate_card, gpu_class=gpu_classes[name], weight=weight)
            for name, weight in card["weights"].items()
        )
        report.changes.append(Change("rate_cards", key, "created"))


def _by_name(model: type[Model], names: Iterable[str]) -> dict[str, Any]:
    return {o.name: o for o in model.objects.filter(name__in=list(names))}  # type: ignore[attr-defined]


def _upsert(model: type[Model], name: str, values: dict[str, Any]) -> Any:
    obj, _ = model.objects.update_or_create(name=name, defaults={**values, "active": True})  # type: ignore[attr-defined]
    return obj


def _write_gpu_class(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    _upsert(GpuClass, name, dict(fields))


def _write_capability_class(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    _upsert(CapabilityClass, name, dict(fields))


def _write_team(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    team = _upsert(
        Team,
        name,
        {k: fields[k] for k in ("description", "namespace", "cost_center", "fair_share_weight")},
    )
    team.members.set(_users(fields["members"], report))
    gpu_classes = _by_name(GpuClass, fields["quotas"])
    for gpu_name, quota in fields["quotas"].items():
        Quota.objects.update_or_create(team=team, gpu_class=gpu_classes[gpu_name], defaults=quota)
    Quota.objects.filter(team=team).exclude(gpu_class__name__in=list(fields["quotas"])).delete()


def _users(usernames: list[str], report: PolicyReport) -> list[Any]:
    """The users named, creating missing ones without a usable password (they log in later)."""
    user_model = get_user_model()
    users = {u.username: u for u in user_model.objects.filter(username__in=usernames)}
    for username in usernames:
        if username not in users:
            users[username] = user_model.objects.create_user(username=username, password=None)
            report.users_created.append(username)
    return [users[u] for u in usernames]


def _write_queue(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    values = {
        k: v
        for k, v in fields.items()
        if k not in ("allowed_gpu_classes", "allowed_capability_classes", "teams", "job_priority")
    }
    values["min_job_priority"] = fields["job_priority"]["min"]
    values["default_job_priority"] = fields["job_priority"]["default"]
    values["max_job_priority"] = fields["job_priority"]["max"]
    queue = _upsert(Queue, name, values)
    queue.allowed_gpu_classes.set(_by_name(GpuClass, fields["allowed_gpu_classes"]).values())
    queue.allowed_capability_classes.set(
        _by_name(CapabilityClass, fields["allowed_capability_classes"]).values()
    )
    queue.teams.set(_by_name(Team, fields["teams"]).values())


def _write_reservation(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    _upsert(
        Reservation,
        name,
        {
            "team": Team.objects.get(name=fields["team"]),
            "queue": Queue.objects.get(name=fields["queue"]) if fields["queue"] else None,
            "gpu_class": GpuClass.objects.get(name=fields["gpu_class"]),
            "amount": fields["amount"],
            "starts_at": fields["starts_at"],
            "ends_at": fields["ends_at"],
        },
    )


def _prune(section: str, name: str) -> Change:
    """Delete an object the file no longer names, or deactivate it while something refers to it."""
    model = SECTION_MODELS[section]
    obj = model.objects.get(name=name)  # type: ignore[attr-defined]
    try:
        with transaction.atomic():
            obj.delete()
    except ProtectedError as exc:
        model.objects.filter(pk=obj.pk).update(active=False)  # type: ignore[attr-defined]
        counts = Counter(o._meta.verbose_name for o in exc.protected_objects)
        refs = ", ".join(f"{n} {what}{'s' if n > 1 else ''}" for what, n in sorted(counts.items()))
        return Change(section, name, "deactivated", note=f"still referenced by {refs}")
    return Change(section, name, "removed")


# --- Leases --------------------------------------------------------------------------------------


def lease_acquire(*, name: str, holder: str, ttl: timedelta) -> bool:
    """Take (or renew) the lease ``name`` for ``holder`` for ``ttl``; False if someone else holds
    an unexpired one. One statement decides — insert the lease, or take it over where it has
    expired or is ours — so two takers never both win, on SQLite and PostgreSQL alike. (It runs
    for every submission, whose reconcile requests coalesce on a lease: one round trip, no
    savepoint.)"""
    now = timezone.now()
    ops = connection.ops
    table = ops.quote_name(Lease._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (name, holder, expires_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
            f"expires_at = excluded.expires_at WHERE {table}.expires_at <= %s "
            f"OR {table}.holder = excluded.holder RETURNING 1",
            [
                name,
                holder,
                ops.adapt_datetimefield_value(now + ttl),
                ops.adapt_datetimefield_value(now),
            ],
        )
        return cursor.fetchone() is not None


def lease_release(*, name: str, holder: str) -> None:
    """Give the lease back early (only if ``holder`` still holds it)."""
    Lease.objects.filter(name=name, holder=holder).update(expires_at=timezone.now())


# --- Jobs ----------------------------------------------------------------------------------------


class JobNotCancellable(Exception):
    """The job already finished (or was cancelled)."""


def job_cancel(*, job: Job, by: Any) -> Job:
    """Cancel a pending, admitted, running or preempted job. One that holds or held pods shows
    ``terminating`` until the reconcile has deleted its Kubernetes Job and the pods are gone.
    Raises ``JobNotCancellable`` for a job that has already ended."""
    now = timezone.now()
    with transaction.atomic():
        # Lock the row: the reconcile may be moving it (pending → admitted) right now, and
        # whether pods must be waited for depends on the state it is really in.
        current = Job.objects.select_for_update().get(pk=job.pk)
        if current.state not in ACTIVE_JOB_STATES:
            raise JobNotCancellable(f"job {job.pk} is {current.state}")
        holds_pods = current.state in (JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTED)
        Job.objects.filter(pk=job.pk).update(
            state=JobState.CANCELLED,
            terminating=holds_pods,
            finished_at=now,
            pending_reasons=[],
            position=None,
            estimated_start=None,
        )
        JobEvent.objects.create(
            job_id=job.pk, at=now, kind="cancelled", message=f"cancelled by {by.get_username()}"
        )
        from queues.tasks import request_reconcile

        request_reconcile()
    job.refresh_from_db()
    return job


class JobRejected(Exception):
    """The submission breaks the queue's terms; ``errors`` maps each field to its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


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


def job_submit(*, request: JobRequest) -> Job:
    """Accept a job if it keeps its queue's terms; the job is committed before anything else
    happens, then a reconcile is requested. Raises ``JobRejected`` naming every field that
    breaks a term; nothing is stored then."""
    errors = job_request_errors(request)
    if errors:
        raise JobRejected(errors)
    return _jobs_store([request])[0]


class BatchRejected(Exception):
    """Some submissions of a batch break their queues' terms; ``errors`` maps the position of
    each refused one (from 0) to its errors by field."""

    def __init__(self, errors: dict[int, dict[str, list[str]]]) -> None:
        super().__init__(f"{len(errors)} submissions refused (first: #{min(errors)})")
        self.errors = errors


def job_submit_batch(*, requests: list[JobRequest]) -> list[Job]:
    """Accept every job of a batch (a sweep, say) or none: each is checked against its queue's
    terms as ``job_submit`` checks one; then all are stored in one transaction and one
    reconcile is requested. Raises ``BatchRejected`` naming every refused submission."""
    cache: dict[tuple, Any] = {}
    errors = {}
    for index, request in enumerate(requests):
        if refused := job_request_errors(request, cache=cache):
            errors[index] = refused
    if errors:
        raise BatchRejected(errors)
    return _jobs_store(requests)


def _jobs_store(requests: list[JobRequest]) -> list[Job]:
    """Store accepted submissions with their ``submitted`` events (one transaction), then ask
    for a reconcile once it commits."""
    now = timezone.now()
    jobs = [_job_row(r, now) for r in requests]
    with transaction.atomic():
        jobs = Job.objects.bulk_create(jobs)
        JobEvent.objects.bulk_create(
            JobEvent(
                job=job, at=now, kind="submitted", message=f"submitted to queue {job.queue.name}"
            )
            for job in jobs
        )
        from queues.tasks import request_reconcile

        request_reconcile()
    return jobs


def _job_row(request: JobRequest, now: datetime) -> Job:
    queue = request.queue
    checkpoint = request.checkpoint_interval
    if queue.may_preempt and checkpoint is None:
        checkpoint = queue.checkpoint_interval
    return Job(
        owner=request.owner,
        team=request.team,
        queue=queue,
        capability_class=request.capability_class,
        name=request.name,
        pods=request.pods,
        gpus_per_pod=request.gpus_per_pod,
        mig_profile=request.capability_class.mig_profile,
        image=request.image.strip(),
        command=list(request.command),
        args=list(request.args),
        env=dict(request.env),
        runtime_limit=request.runtime,
        checkpoint_interval=checkpoint,
        priority=request.job_priority,
        declared_gpu_memory_gb=request.declared_gpu_memory_gb,
        cpu_millicores_per_pod=request.cpu_millicores_per_pod,
        memory_mib_per_pod=request.memory_mib_per_pod,
        submitted_at=now,
    )


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


def job_checkpoint(*, job: Job, at: datetime | None = None) -> bool:
    """Record a real checkpoint of a running job (reported by the job with its token); False if
    the job is not running. Preemption then counts lost work from here."""
    at = at or timezone.now()
    with transaction.atomic():
        recorded = Job.objects.filter(pk=job.pk, state=JobState.RUNNING).update(
            last_checkpoint_at=at
        )
        if recorded:
            JobEvent.objects.create(
                job_id=job.pk, at=at, kind="checkpoint", message="checkpoint reported"
            )
    return bool(recorded)


def queue_stats_refresh(*, now: datetime) -> None:
    """Store every queue's live numbers (free GPUs, past waits, counts) for the catalog."""
    from queues.selectors import queue_stats_compute

    computed = queue_stats_compute(now=now)
    with transaction.atomic():
        QueueStats.objects.exclude(queue_id__in=list(computed)).delete()
        for queue_id, values in computed.items():
            QueueStats.objects.update_or_create(
                queue_id=queue_id, defaults={**values, "computed_at": now}
            )
