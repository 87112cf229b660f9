"""A job request and every rule on it: the one place the form, the API, the batch endpoint and
the preview check a request.

Adapters (the HTML form, the API serializers) only turn text and JSON into Python values and
refuse what cannot be read at all (a word where a number goes). Every rule about the values
themselves lives here, so that the form and the API give the same answer under the same field:
``job_request_errors`` checks the values first (sizes, characters, bounds the database can
store), then the queue's terms.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple

from django.conf import settings
from django.db.models import Count, Exists, Q, QuerySet
from django.utils import timezone

from portal.formatting import HIDDEN_CHARACTERS, display, format_duration, has_hidden_characters
from portal.masking import MASK, looks_secret, shown_env
from queues.admission.entitlement import Entitlement
from queues.admission.never import (
    ClassView,
    per_user_gpu_cap,
    request_never_fits,
    user_limit_problem,
)
from queues.admission.pods import (
    DEFAULT_POD_CPU_MILLICORES,
    DEFAULT_POD_MEMORY_MIB,
    UNIT_WORDS,
    NodeSize,
    node_devices,
    pod_gpu_eq,
    pod_size_problems,
    request_mode,
)
from queues.admission.snapshot import borrowing_allowed
from queues.cluster.manifests import ENV_NAME, RESERVED_ENV_PREFIX
from queues.cluster.secrets import EnvValue, SecretKeyRef, env_of_json
from queues.models import (
    CapabilityClass,
    GpuClass,
    Job,
    JobState,
    Node,
    Queue,
    Quota,
    RateCard,
    Reservation,
    SharingMode,
    SubmissionSettings,
    Team,
    TeamMembership,
)
from queues.rates import gpu_amount

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# Integer columns are 32-bit on PostgreSQL: a larger number would fail in the database.
INT_MAX = 2_147_483_647
# Far beyond any queue's maximum; keeps a duration storable (microseconds in 64 bits).
MAX_DURATION = timedelta(days=10000)
MAX_NAME_LENGTH = 100
MAX_IMAGE_LENGTH = 500
MAX_LIST_ITEMS = 256  # command items, arguments, environment variables
MAX_ITEM_LENGTH = 4096
MAX_ENV_NAME_LENGTH = 256
# What a job may name in a Secret reference, as the API server checks a pod: a Secret's name is
# a DNS-1123 subdomain, a key what Kubernetes calls a config key.
SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
MAX_SECRET_NAME_LENGTH = 253
# The OCI distribution reference grammar: [registry[:port]/]path[:tag][@digest], ASCII only.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
)
IMAGE_REFERENCE = re.compile(
    rf"(?:{_DOMAIN}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
# The messages adapters give for values they cannot read at all, the same in form and API.
NOT_A_WHOLE_NUMBER = "must be a whole number"
NO_SUCH_NAME = "no {what} named {value}"


class Syntax(StrEnum):
    """How the submitter wrote the request: a refusal that explains how to write something
    quotes the submitter's own syntax."""

    API = "api"  # JSON: "WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}
    FORM = "form"  # a line: WANDB_API_KEY=secret:wandb/api-key


# The form's spelling of a reference to a Secret's key: NAME=secret:<secret>/<key>.
FORM_SECRET_PREFIX = "secret:"


@dataclass(frozen=True)
class JobRequest:
    """A submission as the form or the API gives it, before it is accepted."""

    owner: User  # the submitting user
    team: Team
    queue: Queue
    capability_class: CapabilityClass
    image: str = ""
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: dict[str, EnvValue] = field(default_factory=dict)  # text, or a Secret's key
    env_from: list[str] = field(default_factory=list)  # Secrets: each key a variable
    pods: int = 1
    gpus_per_pod: int = 1
    runtime_limit: timedelta | None = None
    priority: int | None = None
    checkpoint_interval: timedelta | None = None
    declared_gpu_memory_gb: int | None = None
    cpu_millicores_per_pod: int = DEFAULT_POD_CPU_MILLICORES
    memory_mib_per_pod: int = DEFAULT_POD_MEMORY_MIB
    name: str = ""
    syntax: Syntax = Syntax.API  # not a field of the job: how its messages quote it

    @classmethod
    def of(
        cls, *, owner: User, values: Mapping[str, Any], syntax: Syntax = Syntax.API
    ) -> JobRequest:
        """A request from the values an adapter read, by field name (absent: the default)."""
        return cls(
            owner=owner,
            syntax=syntax,
            **{name: values[name] for name in REQUEST_FIELDS if name in values},
        )

    @classmethod
    def of_job(cls, job: Job) -> JobRequest:
        """The request that would submit ``job`` again, as stored (its environment's
        references as ``SecretKeyRef``)."""
        values = {name: getattr(job, name) for name in REQUEST_FIELDS}
        values["env"] = env_of_json(job.env)
        values["env_from"] = list(job.env_from)
        return cls(owner=job.owner, **values)

    def values(self) -> dict[str, Any]:
        """The request's fields by name, without the owner (a form's initial values)."""
        return {name: getattr(self, name) for name in REQUEST_FIELDS}

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


# The fields the terms' arithmetic multiplies (GPU-equivalents, pod sizes).
SIZE_FIELDS = frozenset(
    {
        "pods",
        "gpus_per_pod",
        "cpu_millicores_per_pod",
        "memory_mib_per_pod",
        "declared_gpu_memory_gb",
    }
)

# The one list of a request's fields: adapters, resubmit and the stored job follow it.
REQUEST_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(JobRequest) if f.name not in ("owner", "syntax")
)


def resubmit_values(job: Job) -> tuple[dict[str, Any], list[str]]:
    """The values that prefill the form to submit ``job`` again, and the names of the variables
    whose values the copy does not carry. A plain value of a secret-looking name is never shown
    (``portal.masking``), so the copy holds the mask instead, which a submission refuses with
    how to reference a Secret: the mask is never submitted as a value."""
    values = JobRequest.of_job(job).values()
    shown = shown_env(job.env)
    values["env"] = env_of_json(shown)
    return values, sorted(name for name, value in shown.items() if value == MASK)


def job_request_errors(
    request: JobRequest, *, lookups: RequestLookups | None = None
) -> dict[str, list[str]]:
    """Every way ``request`` breaks a rule, by field (empty: it keeps them all): first its values
    (sizes, characters, what the database can store), then its queue's terms. A field whose value
    is already wrong is not also judged against the terms. ``lookups`` remembers what was read
    for the requests of one batch (memberships, quotas, nodes)."""
    lookups = RequestLookups() if lookups is None else lookups
    errors = request_value_errors(request, lookups=lookups)
    # Sizes out of every bound are not measured against the terms (their arithmetic, with
    # 10**25 pods, overflows what any message can show); the names' rules still apply.
    judge = request_access_errors if errors.keys() & SIZE_FIELDS else request_term_errors
    for field_name, messages in judge(request, lookups=lookups).items():
        if field_name not in errors:
            errors[field_name] = messages
    return errors


def request_value_errors(
    request: JobRequest, *, lookups: RequestLookups | None = None
) -> dict[str, list[str]]:
    """What is wrong with the request's values on their own, by field (with the policy's
    allowance of plain secret-looking variables, remembered in ``lookups``)."""
    errors: dict[str, list[str]] = {}
    lookups = RequestLookups() if lookups is None else lookups

    def refuse(field_name: str, message: str | None) -> None:
        if message:
            errors.setdefault(field_name, []).append(message)

    refuse("name", _text_problem(request.name, MAX_NAME_LENGTH, blank=True))
    refuse("image", _image_problem(request.image))
    refuse("command", _list_problem(request.command))
    refuse("args", _list_problem(request.args))
    for message in env_problems(request, allowed=lambda: plain_env_names_allowed(lookups)):
        refuse("env", message)
    for message in env_from_problems(request.env_from):
        refuse("env_from", message)
    for name in ("pods", "gpus_per_pod", "cpu_millicores_per_pod", "memory_mib_per_pod"):
        refuse(name, _count_problem(getattr(request, name)))
    if request.declared_gpu_memory_gb is not None:
        refuse("declared_gpu_memory_gb", _count_problem(request.declared_gpu_memory_gb))
    if request.priority is not None and abs(request.priority) > INT_MAX:
        refuse("priority", f"must be from {-INT_MAX} to {INT_MAX}")
    for name in ("runtime_limit", "checkpoint_interval"):
        refuse(name, _duration_problem(getattr(request, name)))
    return errors


def _text_problem(text: str, limit: int, *, blank: bool = False) -> str | None:
    if not blank and not text.strip():
        return "required"
    if len(text) > limit:
        return f"at most {limit} characters (this has {len(text):,})"
    if has_hidden_characters(text):
        # They would make a name or an image read differently from what runs.
        return HIDDEN_CHARACTERS
    return None


def _image_problem(image: str) -> str | None:
    if problem := _text_problem(image, MAX_IMAGE_LENGTH):
        return problem
    if not IMAGE_REFERENCE.fullmatch(image):
        return (
            f"{image} is not an image reference like registry.example.com/team/train:1.4 "
            "(lowercase path, optional :tag and @sha256:digest)"
        )
    if not image_allowed(image):
        return (
            f"{image} is not from an allowed registry "
            f"({', '.join(settings.ALLOWED_IMAGE_REGISTRIES)})"
        )
    return None


def _list_problem(items: list[str]) -> str | None:
    if len(items) > MAX_LIST_ITEMS:
        return f"at most {MAX_LIST_ITEMS} items (this has {len(items):,})"
    for number, item in enumerate(items, start=1):
        if len(item) > MAX_ITEM_LENGTH:
            return f"item {number}: at most {MAX_ITEM_LENGTH} characters"
        if "\x00" in item:
            return f"item {number}: must not contain a NUL character"
        if has_hidden_characters(item, line_breaks=True):
            # A bidirectional override or a zero-width space makes what is reviewed differ
            # from what runs.
            return f"item {number}: {HIDDEN_CHARACTERS}"
    return None


def env_problems(request: JobRequest, *, allowed: Callable[[], frozenset[str]]) -> list[str]:
    """What is wrong with the request's environment variables, each message naming the
    variable (``env.WANDB_API_KEY.secret: …``). ``allowed`` gives the policy's secret-looking
    names that may carry a plain value (read only when one is given)."""
    env = request.env
    if len(env) > MAX_LIST_ITEMS:
        return [f"at most {MAX_LIST_ITEMS} variables (this has {len(env):,})"]
    problems = []
    for name, value in env.items():
        shown = name if len(name) <= 40 else name[:40] + "…"
        if len(name) > MAX_ENV_NAME_LENGTH:
            problems.append(f"{shown!r}: a name has at most {MAX_ENV_NAME_LENGTH} characters")
        elif not ENV_NAME.fullmatch(name):
            problems.append(
                f"{shown!r} is not a valid variable name (letters, digits, '_', '-', '.'; "
                "not starting with a digit)"
            )
        elif name.startswith(RESERVED_ENV_PREFIX):
            problems.append(f"{name} is reserved: the portal sets {RESERVED_ENV_PREFIX}…")
        elif isinstance(value, SecretKeyRef):
            if problem := secret_name_problem(value.secret):
                problems.append(f"env.{name}.secret: {problem}")
            if problem := secret_key_problem(value.key):
                problems.append(f"env.{name}.key: {problem}")
        elif len(value) > MAX_ITEM_LENGTH:
            problems.append(f"{name}: a value has at most {MAX_ITEM_LENGTH} characters")
        elif "\x00" in value:
            problems.append(f"{name}: a value must not contain a NUL character")
        elif has_hidden_characters(value, line_breaks=True):
            problems.append(f"{name}: a value {HIDDEN_CHARACTERS}")
        elif value == MASK:
            again = " or type the value again" if name in allowed() else ""
            problems.append(
                f"env.{name}: {MASK} is how the portal hides a secret value, not the value: "
                f"reference a Kubernetes Secret instead{again} ({_reference(request, name)})"
            )
        elif looks_secret(name) and name not in allowed():
            namespace = request.team.namespace
            problems.append(
                f"env.{name}: the name looks secret, and the portal keeps no secret values: put "
                f"the value in a Kubernetes Secret in namespace {namespace} (kubectl create "
                f"secret generic <secret> --from-literal=<key>=… -n {namespace}) and reference "
                f"it as {_reference(request, name)}; an admin may allow plain values for "
                f"{name} in the policy"
            )
    return problems


def _reference(request: JobRequest, name: str) -> str:
    """How the submitter writes a reference to a Secret's key, in its own syntax."""
    if request.syntax == Syntax.FORM:
        return f"{name}={FORM_SECRET_PREFIX}<secret>/<key>"
    return f'"{name}": {{"secret": "<secret>", "key": "<key>"}}'


def env_from_problems(secrets: Sequence[str]) -> list[str]:
    """What is wrong with the Secrets named in ``env_from``."""
    if len(secrets) > MAX_LIST_ITEMS:
        return [f"at most {MAX_LIST_ITEMS} Secrets (this has {len(secrets):,})"]
    problems = []
    for secret, count in Counter(secrets).items():
        if problem := secret_name_problem(secret):
            problems.append(problem)
        elif count > 1:
            problems.append(f"Secret {secret} is named {count} times")
    return problems


def _quoted(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "…")


def secret_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Secret (a DNS-1123 subdomain), or None."""
    if len(name) > MAX_SECRET_NAME_LENGTH or not SECRET_NAME.fullmatch(name):
        return (
            f"{_quoted(name)} is not a valid Secret name: lowercase letters, digits, '-' and '.', "
            f"starting and ending with a letter or digit, at most {MAX_SECRET_NAME_LENGTH} "
            "characters"
        )
    return None


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a key of a Secret, or None."""
    if len(key) > MAX_SECRET_NAME_LENGTH or not SECRET_KEY.fullmatch(key):
        return (
            f"{_quoted(key)} is not a valid key of a Secret: letters, digits, '-', '_' and '.', "
            f"at most {MAX_SECRET_NAME_LENGTH} characters"
        )
    if key in (".", "..") or key.startswith(".."):
        return f"{_quoted(key)} is not a valid key of a Secret: not '.' or '..' or starting '..'"
    return None


def plain_env_names_allowed(lookups: RequestLookups) -> frozenset[str]:
    """The secret-looking variable names the policy lets carry a plain value (``submissions``
    section), read once per ``lookups``."""
    if lookups.plain_env_names is None:
        names = (
            SubmissionSettings.objects.filter(pk=1)
            .values_list("plain_env_names_allowed", flat=True)
            .first()
        )
        lookups.plain_env_names = frozenset(names or ())
    return lookups.plain_env_names


def _count_problem(value: int) -> str | None:
    if value < 1:
        return "must be at least 1"
    if value > INT_MAX:
        return f"must be at most {INT_MAX:,}"
    return None


def _duration_problem(value: timedelta | None) -> str | None:
    if value is None:
        return None
    if value <= timedelta(0):
        return "must be longer than 0s"
    if value > MAX_DURATION:
        return f"must be at most {format_duration(MAX_DURATION)}"
    return None


# The key under which a refusal that concerns no single field is reported (DRF's own name; the
# form shows it above the fields).
NON_FIELD = "non_field_errors"


def pending_cap_errors(requests: Sequence[JobRequest]) -> dict[int, dict[str, list[str]]]:
    """Which of ``requests`` (one submission, or a batch in order) would take its owner past
    ``MAX_PENDING_JOBS_PER_USER`` pending jobs (all queues) or its queue past
    ``MAX_PENDING_JOBS_PER_QUEUE`` (all users), counting the jobs already pending and those of
    the batch before it; by position. A cap keeps one script from filling the queue for everyone
    and bounds what each reconcile and preview simulates. The caller holds the owners' and
    queues' rows locked (``select_for_update``) so that concurrent submissions are counted."""
    per_user, per_queue = settings.MAX_PENDING_JOBS_PER_USER, settings.MAX_PENDING_JOBS_PER_QUEUE
    owners = {r.owner.pk for r in requests}
    queues = {r.queue.pk: r.queue for r in requests}
    pending = Job.objects.filter(state=JobState.PENDING)
    by_owner = Counter(
        dict(
            pending.filter(owner_id__in=owners)
            .values("owner_id")
            .annotate(n=Count("id"))
            .values_list("owner_id", "n")
        )
    )
    by_queue = Counter(
        dict(
            pending.filter(queue_id__in=queues)
            .values("queue_id")
            .annotate(n=Count("id"))
            .values_list("queue_id", "n")
        )
    )
    errors: dict[int, dict[str, list[str]]] = {}
    for index, request in enumerate(requests):
        by_owner[request.owner.pk] += 1
        by_queue[request.queue.pk] += 1
        if by_owner[request.owner.pk] > per_user:
            errors.setdefault(index, {}).setdefault(NON_FIELD, []).append(
                f"{request.owner.get_username()} would have {by_owner[request.owner.pk]:,} "
                f"pending jobs: at most {per_user:,} may wait at once (MAX_PENDING_JOBS_PER_USER); "
                "cancel some or wait for them to start"
            )
        if by_queue[request.queue.pk] > per_queue:
            errors.setdefault(index, {}).setdefault("queue", []).append(
                f"queue {request.queue.name} would hold {by_queue[request.queue.pk]:,} pending "
                f"jobs: at most {per_queue:,} may wait in one queue (MAX_PENDING_JOBS_PER_QUEUE)"
            )
    return errors


def request_term_errors(
    request: JobRequest, *, lookups: RequestLookups | None = None
) -> dict[str, list[str]]:
    """Every way ``request`` breaks its queue's terms, by field."""
    lookups = RequestLookups() if lookups is None else lookups
    errors = request_access_errors(request, lookups=lookups)
    queue = request.queue

    def refuse(field_name: str, message: str) -> None:
        errors.setdefault(field_name, []).append(message)

    if request.runtime > queue.max_runtime:
        refuse(
            "runtime_limit",
            f"{format_duration(request.runtime)} is over queue {queue.name}'s maximum of "
            f"{format_duration(queue.max_runtime)}",
        )
    if request.gpu_equivalents > Fraction(str(queue.max_gpus_per_job)):
        refuse(
            "gpus_per_pod",
            f"{request.pods} pod(s) × {request.gpus_per_pod} = "
            f"{_fraction_text(request.gpu_equivalents)} GPU-equivalents is over "
            f"queue {queue.name}'s maximum of {display(queue.max_gpus_per_job)} per job",
        )
    user_limit = user_limit_problem(
        queue=queue.name,
        max_running_jobs_per_user=queue.max_running_jobs_per_user,
        max_gpu_eq_per_user=per_user_gpu_cap(queue.max_gpus_per_user),
        demand=request.gpu_equivalents,
    )
    if user_limit is not None:
        refuse(
            "gpus_per_pod" if user_limit.user_limit is not None else "queue",
            f"{user_limit.message}: {user_limit.hint}",
        )
    if not queue.min_job_priority <= request.job_priority <= queue.max_job_priority:
        refuse(
            "priority",
            f"must be from {queue.min_job_priority} to {queue.max_job_priority} "
            f"in queue {queue.name}",
        )
    if queue.sharing_mode == SharingMode.TIME_SLICED and request.declared_gpu_memory_gb is None:
        refuse(
            "declared_gpu_memory_gb",
            "time-sliced GPUs share their memory: declare how much your job uses",
        )
    if not errors:  # a request refused for other reasons is not also judged for ever
        for field_name, messages in never_fits_problems(request, lookups=lookups).items():
            for message in messages:
                refuse(field_name, message)
    if queue.pk not in lookups.node_sizes:
        lookups.node_sizes[queue.pk] = node_sizes(queue)
    for field_name, messages in pod_size_problems(
        queue=queue.name,
        cpu_millicores=request.cpu_millicores_per_pod,
        memory_mib=request.memory_mib_per_pod,
        sizes=lookups.node_sizes[queue.pk],
    ).items():
        for message in messages:
            refuse(field_name, message)
    return errors


def request_access_errors(
    request: JobRequest, *, lookups: RequestLookups | None = None
) -> dict[str, list[str]]:
    """Whether the owner may use the team, the team the queue, and the queue the capability
    class: the rules that need nothing but those three names (the form reports them even while
    other fields are still unreadable)."""
    errors: dict[str, list[str]] = {}
    team, queue, capability_class = request.team, request.queue, request.capability_class
    lookups = RequestLookups() if lookups is None else lookups

    def refuse(field_name: str, message: str) -> None:
        errors.setdefault(field_name, []).append(message)

    key = AccessKey(request.owner.pk, team.pk, queue.pk, capability_class.pk)
    if key not in lookups.access:
        lookups.access[key] = _access(request)
    access = lookups.access[key]
    if not access.member:
        refuse("team", f"you are not a member of team {team.name}")
    if not queue.active or not access.team_allowed:
        refuse("queue", f"team {team.name} may not submit to queue {queue.name}")
    if not access.class_allowed:
        allowed = ", ".join(queue.allowed_capability_classes.values_list("name", flat=True))
        refuse(
            "capability_class",
            f"queue {queue.name} does not allow capability class {capability_class.name} "
            f"(allowed: {allowed})",
        )
    if capability_class.mig_profile and queue.sharing_mode != SharingMode.MIG:
        refuse(
            "capability_class",
            f"{capability_class.name} asks for a MIG slice, but queue {queue.name} hands out "
            f"{queue.get_sharing_mode_display()}",
        )
    return errors


def never_fits_problems(
    request: JobRequest, *, lookups: RequestLookups | None = None
) -> dict[str, list[str]]:
    """A request no state of the cluster could ever admit, refused at submit with the engine's
    ``NeverFits`` words (``queues.admission.never.request_never_fits``): on every GPU class its
    capability class resolves to in its queue, it needs more than its team may ever hold there,
    or its pods do not fit the class's nodes even when they are empty. The engine also judges
    taints, topology and CPU or memory once a job waits; a class whose nodes the portal has not
    seen yet is given the benefit of the doubt."""
    lookups = RequestLookups() if lookups is None else lookups
    classes = _classes_of(request, lookups)
    if not classes:
        return {}  # the engine says NoMatchingGpuClass, with each class's reason
    nodes = _class_nodes(classes, lookups)
    seen = _any_node(lookups)
    if seen and not any(nodes[g.pk] for g in classes):
        # The cluster has been seen, and it has none of the GPUs this request can use: no
        # quota would help, the capability class (or the queue) is what to change.
        return {"capability_class": [_no_node_text(request, classes)]}
    mode = request_mode(
        time_sliced_queue=request.queue.sharing_mode == SharingMode.TIME_SLICED,
        mig_profile=request.capability_class.mig_profile,
    )
    weights = _class_weights(lookups)
    views = [
        view
        for gpu_class in sorted(classes, key=lambda g: (weights.get(g.pk, Fraction(1)), g.name))
        if (view := _class_view(request, gpu_class, nodes[gpu_class.pk], mode, seen, lookups))
    ]
    problem = request_never_fits(
        team=request.team.name,
        pods=request.pods,
        devices_per_pod=request.gpus_per_pod,
        unit=UNIT_WORDS[mode],
        classes=views,
    )
    return {} if problem is None else {"gpus_per_pod": [f"{problem.message}: {problem.hint}"]}


def _class_view(
    request: JobRequest,
    gpu_class: GpuClass,
    nodes: list[ClassNode],
    mode: str,
    seen: bool,
    lookups: RequestLookups,
) -> ClassView | None:
    """The request on one GPU class, as the engine would see it; None when the class has no
    node serving the request's kind of device (the engine does not consider it either)."""
    profile = request.capability_class.mig_profile or None
    if profile and profile not in gpu_class.mig_profiles:
        return None
    devices = tuple(
        d
        for n in nodes
        if (
            d := node_devices(
                mode,
                profile,
                gpus=n.gpus,
                mig_layout=n.mig_layout,
                time_slice_replicas=n.time_slice_replicas,
            )
        )
        is not None
    )
    if seen and not devices:
        return None
    per_pod = pod_gpu_eq(
        mode,
        gpus_per_pod=request.gpus_per_pod,
        mig_share=gpu_class.mig_share(profile) if profile else Fraction(1),
        least_replicas=min(
            (
                n.time_slice_replicas
                for n in nodes
                if n.time_slice_replicas > 1 and not n.mig_layout
            ),
            default=1,
        ),
    )
    return ClassView(
        name=gpu_class.name,
        entitlement=_entitlement(request, gpu_class, lookups),
        demand=per_pod * request.pods,
        devices=devices if seen else None,
    )


def _no_node_text(request: JobRequest, classes: list[GpuClass]) -> str:
    queue, capability_class = request.queue, request.capability_class
    names = " or ".join(g.name for g in classes)
    allowed = list(queue.allowed_gpu_classes.filter(active=True).values_list("name", flat=True))
    where = (
        f"queue {queue.name} allows {', '.join(allowed)}"
        if allowed
        else f"queue {queue.name} allows every class"
    )
    return (
        f"capability class {capability_class.name} needs {names} here ({where}); no {names} node "
        "exists in the cluster: choose a capability class that matches a GPU the cluster has"
    )


class AccessKey(NamedTuple):
    owner: int
    team: int
    queue: int
    capability_class: int


class ClassesKey(NamedTuple):
    queue: int
    capability_class: int


class EntitlementKey(NamedTuple):
    team: int
    queue: int
    gpu_class: int


@dataclass(frozen=True, slots=True)
class ClassNode:
    """A node of a GPU class as never-fits reads it, whatever its health (a node in maintenance
    or broken comes back): its GPUs, MIG layout and time-slice replicas."""

    gpus: int
    mig_layout: dict[str, int]
    time_slice_replicas: int


@dataclass(slots=True)
class RequestLookups:
    """What checking the requests of one submission, batch or preview reads from the database,
    each thing once (keys are ids): the policy's plain secret-looking names, whether the cluster
    has been seen, the rate card's class weights, and per request the owner's access, the GPU
    classes its capability class resolves to, their nodes, the team's entitlements and the
    queue's node sizes. ``requests_prefetch`` fills it for a whole batch in a few queries."""

    plain_env_names: frozenset[str] | None = None
    any_node: bool | None = None
    class_weights: dict[int, Fraction] | None = None
    access: dict[AccessKey, Access] = field(default_factory=dict)
    classes: dict[ClassesKey, list[GpuClass]] = field(default_factory=dict)
    class_nodes: dict[int, list[ClassNode]] = field(default_factory=dict)
    entitlements: dict[EntitlementKey, Entitlement] = field(default_factory=dict)
    node_sizes: dict[int, list[NodeSize]] = field(default_factory=dict)


def _classes_of(request: JobRequest, lookups: RequestLookups) -> list[GpuClass]:
    """The GPU classes the request's capability class resolves to in its queue (remembered)."""
    queue = request.queue
    key = ClassesKey(queue.pk, request.capability_class.pk)
    if key not in lookups.classes:
        allowed = list(queue.allowed_gpu_classes.filter(active=True)) or list(
            GpuClass.objects.active()
        )
        matches = set(request.capability_class.resolve(allowed).matches)
        lookups.classes[key] = [g for g in allowed if g.name in matches]
    return lookups.classes[key]


def _any_node(lookups: RequestLookups) -> bool:
    """Whether the cluster has been seen: any node mirrored at all."""
    if lookups.any_node is None:
        lookups.any_node = Node.objects.exists()
    return lookups.any_node


def _class_weights(lookups: RequestLookups) -> dict[int, Fraction]:
    """The billing weight of each GPU class on the rate card in force (the engine tries
    classes cheapest first; a class without one weighs 1)."""
    if lookups.class_weights is None:
        card = RateCard.objects.in_force(timezone.now())
        lookups.class_weights = (
            {
                class_id: Fraction(str(weight))
                for class_id, weight in card.weights.values_list("gpu_class_id", "weight")
            }
            if card
            else {}
        )
    return lookups.class_weights


def _class_nodes(classes: list[GpuClass], lookups: RequestLookups) -> dict[int, list[ClassNode]]:
    """Per GPU class of ``classes``, its nodes (read once per class)."""
    missing = [g.pk for g in classes if g.pk not in lookups.class_nodes]
    if missing:
        for class_id in missing:
            lookups.class_nodes[class_id] = []
        for class_id, gpus, layout, replicas in Node.objects.filter(
            gpu_class_id__in=missing
        ).values_list("gpu_class_id", "gpu_count", "mig_layout", "time_slice_replicas"):
            lookups.class_nodes[class_id].append(ClassNode(gpus, layout or {}, replicas))
    return {g.pk: lookups.class_nodes[g.pk] for g in classes}


def requests_prefetch(requests: list[JobRequest], lookups: RequestLookups) -> None:
    """Read into ``lookups``, in a few queries for the whole batch, what checking ``requests``
    needs per team: memberships, the queues' teams and capability classes, quotas and
    reservations. A batch spread over thirty teams then costs what one of one team does; the
    rules read the lookups exactly as they would have read the database one team at a time."""
    keys = {AccessKey(r.owner.pk, r.team.pk, r.queue.pk, r.capability_class.pk) for r in requests}
    owners, teams = {k.owner for k in keys}, {k.team for k in keys}
    queues, capabilities = {k.queue for k in keys}, {k.capability_class for k in keys}
    members = set(
        TeamMembership.objects.filter(user_id__in=owners, team_id__in=teams).values_list(
            "user_id", "team_id"
        )
    )
    queue_teams = set(
        Queue.teams.through.objects.filter(queue_id__in=queues, team_id__in=teams).values_list(
            "queue_id", "team_id"
        )
    )
    queue_capabilities = set(
        Queue.allowed_capability_classes.through.objects.filter(
            queue_id__in=queues, capabilityclass_id__in=capabilities
        ).values_list("queue_id", "capabilityclass_id")
    )
    for key in keys:
        lookups.access.setdefault(
            key,
            Access(
                (key.owner, key.team) in members,
                (key.queue, key.team) in queue_teams,
                (key.queue, key.capability_class) in queue_capabilities,
            ),
        )
    wanted = {
        EntitlementKey(r.team.pk, r.queue.pk, gpu_class.pk): r
        for r in requests
        for gpu_class in _classes_of(r, lookups)
    }
    class_ids = {k.gpu_class for k in wanted}
    quotas = {
        (q.team_id, q.gpu_class_id): q
        for q in Quota.objects.filter(team_id__in=teams, gpu_class_id__in=class_ids)
    }
    reservations = list(
        _open_reservations()
        .filter(team_id__in=teams, gpu_class_id__in=class_ids)
        .values_list("team_id", "gpu_class_id", "queue_id", "amount")
    )
    for wanted_key, request in wanted.items():
        reserved = max(
            (
                Fraction(str(amount))
                for t, c, q, amount in reservations
                if (t, c) == (wanted_key.team, wanted_key.gpu_class)
                and q in (None, wanted_key.queue)
            ),
            default=Fraction(0),
        )
        lookups.entitlements.setdefault(
            wanted_key,
            entitlement_for(request, quotas.get((wanted_key.team, wanted_key.gpu_class)), reserved),
        )


def _open_reservations() -> QuerySet[Reservation]:
    """Reservations open now or later (the engine's, ``entitlement_of``)."""
    return Reservation.objects.active().filter(
        Q(ends_at__isnull=True) | Q(ends_at__gt=timezone.now())
    )


def _entitlement(request: JobRequest, gpu_class: GpuClass, lookups: RequestLookups) -> Entitlement:
    """The request's team's entitlement on ``gpu_class`` for its queue (remembered)."""
    queue, team = request.queue, request.team
    key = EntitlementKey(team.pk, queue.pk, gpu_class.pk)
    if key not in lookups.entitlements:
        reserved = max(
            (
                Fraction(str(amount))
                for amount in _open_reservations()
                .filter(team=team, gpu_class=gpu_class)
                .filter(Q(queue__isnull=True) | Q(queue=queue))
                .values_list("amount", flat=True)
            ),
            default=Fraction(0),
        )
        quota = Quota.objects.filter(team=team, gpu_class=gpu_class).first()
        lookups.entitlements[key] = entitlement_for(request, quota, reserved)
    return lookups.entitlements[key]


def entitlement_for(request: JobRequest, quota: Quota | None, reserved: Fraction) -> Entitlement:
    """The typed view of the team's entitlement the admission rule reads, from its quota on the
    class and its largest open reservation there."""
    queue = request.queue
    may_borrow = borrowing_allowed(may_borrow=queue.may_borrow, preemption=queue.preemption_class)
    return Entitlement(
        team=request.team.name,
        queue=queue.name,
        nominal=Fraction(str(quota.nominal)) if quota else Fraction(0),
        borrowing_limit=Fraction(str(quota.borrowing_limit)) if quota else Fraction(0),
        reserved=reserved,
        may_borrow=may_borrow,
        reservation_only=queue.reservation_only,
    )


def node_sizes(queue: Queue) -> list[NodeSize]:
    """The sizes of the nodes of the queue's GPU classes, each size once."""
    allowed = Queue.allowed_gpu_classes.through.objects.filter(queue_id=queue.pk)
    return [
        NodeSize(cpu, memory)
        for cpu, memory in Node.objects.filter(
            Q(gpu_class_id__in=allowed.values("gpuclass_id")) | ~Exists(allowed),  # none: any
            gpu_class__isnull=False,
            gpu_class__active=True,
        )
        .values_list("cpu_millicores", "memory_mib")
        .distinct()
    ]


@dataclass(frozen=True, slots=True)
class Access:
    """Whether the owner is in the team, the team may use the queue, and the queue allows the
    capability class."""

    member: bool
    team_allowed: bool
    class_allowed: bool


def _access(request: JobRequest) -> Access:
    """The three membership tests of ``Access`` in one query (a submission's hot path)."""
    team, queue = request.team, request.queue
    row = (
        Team.objects.filter(pk=team.pk)
        .annotate(
            member=Exists(TeamMembership.objects.filter(team_id=team.pk, user_id=request.owner.pk)),
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
    return Access(*row) if row else Access(False, False, False)


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


def _fraction_text(value: Fraction) -> str:
    return display(gpu_amount(value))


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
