"""API representations of jobs: the submission body (also the preview's), the job, its timeline,
its logs, the preview and a checkpoint report.

Serializers only adapt: they turn names into objects and text into values, and refuse what is not
well-formed (an unknown team, a shell string for a command, an environment variable name the
cluster would refuse). Whether a request keeps its queue's terms is ``job_request_errors``'s
business, and its messages reach the client unchanged under their field names.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.validators import ProhibitNullCharactersValidator
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.formatting import format_duration, is_ascii_number_text, parse_duration
from portal.masking import MASK, shown_env
from queues.admission.pods import DEFAULT_POD_CPU_MILLICORES, DEFAULT_POD_MEMORY_MIB
from queues.admission.reasons import ReasonCode
from queues.catalog.serializers import DurationText
from queues.cluster.secrets import SecretKeyRef
from queues.jobs.requests import NO_SUCH_NAME, NOT_A_WHOLE_NUMBER, JobRequest
from queues.jobs.selectors import job_cost_so_far
from queues.models import NAME, CapabilityClass, CapacityKind, Job, JobEvent, JobState, Queue, Team

MAX_BATCH = 500  # submissions in one POST /api/jobs/batch/


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "example": "4h", "description": "90s, 15m, 4h, 1h30m, 7d"},
            {"type": "integer", "minimum": 1, "description": "seconds"},
        ]
    }
)
class DurationInput(serializers.Field):
    """A duration given as the policy writes it (``"4h"``, ``"1h30m"``) or as whole seconds;
    answered as text. Reads only: the bounds are the request's rules (``requests.py``)."""

    default_error_messages = {"invalid": "a duration like 4h, 30m or 1h30m, or a number of seconds"}

    def to_internal_value(self, data: Any) -> timedelta:
        if not isinstance(data, int | str) or isinstance(data, bool):
            self.fail("invalid")
        try:
            return parse_duration(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def to_representation(self, value: timedelta) -> str:
        return format_duration(value)


class _Text(serializers.CharField):
    """Text as given. Its rules (length, characters) are the request's, in ``requests.py``, so
    the API answers as the form does; here only "not a string" is refused."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)
        ]


class _WholeNumber(serializers.IntegerField):
    """A whole number in ASCII digits (int() would read fullwidth and Arabic-Indic ones)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and not is_ascii_number_text(data):
            self.fail("invalid")
        return int(super().to_internal_value(data))


SECRET_KEY_REF_SCHEMA = {
    "type": "object",
    "description": "The value of one key of a Kubernetes Secret in the team's namespace "
    "(the pod's secretKeyRef): the portal never sees it.",
    "properties": {
        "secret": {"type": "string", "example": "wandb", "description": "The Secret's name."},
        "key": {"type": "string", "example": "api-key", "description": "The key in it."},
    },
    "required": ["secret", "key"],
    "additionalProperties": False,
}
ENV_VALUE_SCHEMA = {
    "oneOf": [
        {
            "type": "string",
            "description": f"A plain value. Answered as {MASK} when the name looks secret.",
        },
        SECRET_KEY_REF_SCHEMA,
    ]
}
_ENV_VALUE = 'text, or a key of a Secret: {"secret": "<secret>", "key": "<key>"}'


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": ENV_VALUE_SCHEMA,
        "example": {
            "WANDB_MODE": "offline",
            "WANDB_API_KEY": {"secret": "wandb", "key": "api-key"},
        },
    }
)
class EnvironmentField(serializers.Field):
    """Environment variables, name → a plain value or a reference to a Secret's key. Reads the
    shape only (the names and the Secret's names are the request's rules); answers a stored
    environment as ``portal.masking`` shows it to anybody: references as references, values of
    secret-looking names masked, exactly as the job page does."""

    # Braces doubled: DRF formats these messages.
    default_error_messages = {
        "invalid": "an object of variable name → "
        + _ENV_VALUE.replace("{", "{{").replace("}", "}}")
    }

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("invalid")
        env: dict[str, Any] = {}
        problems = []
        for name, value in data.items():
            if isinstance(value, str):
                env[name] = value
            elif isinstance(value, int | float) and not isinstance(value, bool):
                env[name] = str(value)  # a number is read as its text, as everywhere else
            elif isinstance(value, dict) and set(value) == {"secret", "key"}:
                wrong = [p for p in ("secret", "key") if not isinstance(value[p], str)]
                for part in wrong:
                    problems.append(f"env.{name}.{part}: must be text")
                if not wrong:
                    env[name] = SecretKeyRef(value["secret"], value["key"])
            elif isinstance(value, dict):
                missing = sorted({"secret", "key"} - set(value))
                unknown = sorted(str(k) for k in set(value) - {"secret", "key"})
                problems += [f"env.{name}.{part}: required" for part in missing]
                problems += [
                    f"env.{name}.{part[:40]}: unknown (a reference has secret and key)"
                    for part in unknown
                ]
            else:
                problems.append(f"env.{str(name)[:40]}: must be " + _ENV_VALUE)
        if problems:
            raise serializers.ValidationError(problems)
        return env

    def to_representation(self, value: Any) -> dict[str, Any]:
        return shown_env(value or {})


def _whole_number(**kwargs: Any) -> serializers.IntegerField:
    return _WholeNumber(error_messages={"invalid": NOT_A_WHOLE_NUMBER}, **kwargs)


@extend_schema_field({"type": "string", "example": "4h"})
class DurationOutput(DurationText):
    """A duration as the policy writes it (``"4h"``, ``"1h30m"``)."""


class _NameField(serializers.SlugRelatedField):
    """An object by its name; text that cannot be a name (a NUL byte, say, which PostgreSQL
    refuses in a query) is "no such name" without asking the database. A name is looked up
    once per request body: the submissions of a batch mostly share team, queue and class."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or not NAME.fullmatch(data):
            self.fail("does_not_exist", slug_name=self.slug_field, value=str(data)[:100])
        context = self.context
        assert isinstance(context, dict)  # DRF's context is a plain dict
        found = context.setdefault("_names", {})
        queryset = self.get_queryset()
        assert queryset is not None  # every name field here has one
        key = (queryset.model, data)
        if key not in found:
            found[key] = super().to_internal_value(data)
        return found[key]


def _named(model: type[Any], what: str) -> serializers.SlugRelatedField:
    return _NameField(
        slug_field="name",
        queryset=model.objects.active(),
        error_messages={"does_not_exist": NO_SUCH_NAME.format(what=what, value="{value}")},
        help_text=f"The {what}'s name.",
    )


def _strings(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=_Text(),
        required=False,
        error_messages={"not_a_list": "a list of strings, never a shell string"},
        help_text=help_text,
    )


class JobSubmitSerializer(serializers.Serializer):
    """A submission (and a preview's request). Turns into a ``JobRequest`` with ``to_request``;
    the queue's terms are checked by the service, not here."""

    team = _named(Team, "team")
    queue = _named(Queue, "queue")
    capability_class = _named(CapabilityClass, "capability class")
    name = serializers.CharField(required=False, allow_blank=True, default="")
    pods = _whole_number(required=False, default=1, help_text="Pods of the gang (all or none).")
    gpus_per_pod = _whole_number(
        required=False,
        default=1,
        help_text="Devices per pod: whole GPUs, MIG slices or time-slice replicas.",
    )
    cpu_millicores_per_pod = _whole_number(required=False, default=DEFAULT_POD_CPU_MILLICORES)
    memory_mib_per_pod = _whole_number(required=False, default=DEFAULT_POD_MEMORY_MIB)
    declared_gpu_memory_gb = _whole_number(
        required=False,
        allow_null=True,
        default=None,
        help_text="GPU memory the job uses; required on time-sliced queues.",
    )
    runtime_limit = DurationInput(
        required=False,
        allow_null=True,
        default=None,
        help_text="Defaults to the queue's default runtime.",
    )
    image = serializers.CharField(allow_blank=True)
    command = _strings("The program and its arguments as a list (the image's entrypoint if empty).")
    args = _strings("More arguments, as a list.")
    env = EnvironmentField(
        required=False,
        help_text="Environment variables, name → a plain value, or a key of a Kubernetes "
        'Secret in the team\'s namespace: {"secret": "wandb", "key": "api-key"}. A plain value '
        "of a name that looks secret (…KEY, …TOKEN, …PASSWORD) is refused unless the policy "
        "allows that name.",
    )
    env_from = serializers.ListField(
        child=_Text(),
        required=False,
        error_messages={"not_a_list": "a list of Secret names"},
        help_text="Kubernetes Secrets in the team's namespace whose every key becomes a variable "
        "(the pod's envFrom).",
    )
    checkpoint_interval = DurationInput(
        required=False,
        allow_null=True,
        default=None,
        help_text="Defaults to the queue's where the queue may preempt.",
    )
    priority = _whole_number(
        required=False,
        allow_null=True,
        default=None,
        help_text="Within the queue's bounds; defaults to the queue's default.",
    )

    def to_request(self, *, owner: User) -> JobRequest:
        """The validated body as the service's request, submitted by ``owner``."""
        return self.request_of(self.validated_data, owner=owner)

    @staticmethod
    def request_of(data: dict[str, Any], *, owner: User) -> JobRequest:
        return JobRequest.of(owner=owner, values=data)


class JobBatchSubmitSerializer(serializers.Serializer):
    """Several submissions at once (a sweep): each as ``POST /api/jobs/`` takes one."""

    jobs: serializers.ListSerializer = serializers.ListSerializer(
        child=JobSubmitSerializer(),
        allow_empty=False,
        max_length=MAX_BATCH,
        help_text=f"1 to {MAX_BATCH} jobs.",
    )

    def to_requests(self, *, owner: User) -> list[JobRequest]:
        return [
            JobSubmitSerializer.request_of(item, owner=owner)
            for item in self.validated_data["jobs"]
        ]


class PendingReasonSerializer(serializers.Serializer):
    """Why a pending or admitted job is not running: the code is API, the message for people."""

    code = serializers.ChoiceField(choices=[c.value for c in ReasonCode])
    message = serializers.CharField()
    details = serializers.DictField(help_text="The message's numbers as plain JSON values.")
    hint = serializers.CharField(allow_blank=True, help_text="What you can do; may be empty.")


class JobSerializer(serializers.ModelSerializer):
    """A job as its team sees it: the request, where it stands and what happened to it.

    Reads only the job's row and its foreign keys (owner, team, queue, capability class, GPU
    class), so a list of them costs no query per job when those are joined."""

    owner = serializers.CharField(source="owner.get_username", read_only=True)
    team = serializers.CharField(source="team.name", read_only=True)
    queue = serializers.CharField(source="queue.name", read_only=True)
    capability_class = serializers.CharField(source="capability_class.name", read_only=True)
    gpu_class = serializers.CharField(source="gpu_class.name", read_only=True, allow_null=True)
    state = serializers.ChoiceField(choices=JobState.choices, read_only=True)
    capacity_kind = serializers.ChoiceField(
        choices=CapacityKind.choices,
        allow_blank=True,
        read_only=True,
        help_text="Whose GPUs it runs on: empty until it is admitted.",
    )
    runtime_limit = DurationOutput(read_only=True)
    checkpoint_interval = DurationOutput(read_only=True, allow_null=True)
    nodes = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The node of each pod."
    )
    command = serializers.ListField(child=serializers.CharField(allow_blank=True), read_only=True)
    args = serializers.ListField(child=serializers.CharField(allow_blank=True), read_only=True)
    env = EnvironmentField(
        read_only=True,
        help_text=f"Plain values of names that look secret are {MASK}, as on the job page.",
    )
    env_from = serializers.ListField(child=serializers.CharField(), read_only=True)
    pending_reasons = PendingReasonSerializer(many=True, read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "owner",
            "team",
            "queue",
            "capability_class",
            "pods",
            "gpus_per_pod",
            "mig_profile",
            "cpu_millicores_per_pod",
            "memory_mib_per_pod",
            "declared_gpu_memory_gb",
            "image",
            "command",
            "args",
            "env",
            "env_from",
            "runtime_limit",
            "checkpoint_interval",
            "priority",
            "state",
            "terminating",
            "pending_reasons",
            "estimated_start",
            "likely_start",
            "start_range_low",
            "start_range_high",
            "estimated_start_note",
            "position",
            "queue_length",
            "gpu_class",
            "nodes",
            "capacity_kind",
            "k8s_job_name",
            "attempts",
            "rollbacks",
            "not_before",
            "exit_code",
            "failure_reason",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "last_checkpoint_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "attempts": {
                "help_text": "Times the job went back to the queue after it was admitted "
                "(preempted, drained, its pods lost): 0 for a job on its first run. The job "
                "page shows the same number as 'Requeued'."
            }
        }


class CostSoFarSerializer(serializers.Serializer):
    """What a job's use has cost up to now, by the statements' rule (``job_cost_so_far``)."""

    amount = serializers.DecimalField(max_digits=18, decimal_places=2)
    currency = serializers.CharField()
    normalized_gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=3)
    running = serializers.BooleanField(help_text="Some of its pods still hold GPUs: it grows.")


class JobDetailSerializer(JobSerializer):
    """One job, as ``GET /api/jobs/<id>/`` answers it: the list's fields and its cost so far.

    The cost reads the job's usage intervals and the rate cards, so lists leave it out."""

    cost_so_far = serializers.SerializerMethodField(
        help_text="What its use has cost up to now (open intervals count until now), as the "
        "job page and the statements say it; null before it held any GPU, or when no rate card "
        "prices all of its use."
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "cost_so_far"]
        read_only_fields = fields

    @extend_schema_field(CostSoFarSerializer(allow_null=True))
    def get_cost_so_far(self, job: Job) -> dict[str, Any] | None:
        cost = job_cost_so_far(job, now=timezone.now())
        return CostSoFarSerializer(cost).data if cost is not None else None


class JobBatchSerializer(serializers.Serializer):
    """The jobs a batch stored, in the order they were given."""

    jobs = JobSerializer(many=True, read_only=True)


class JobEventSerializer(serializers.ModelSerializer):
    """One entry of a job's timeline."""

    details = serializers.DictField(read_only=True)

    class Meta:
        model = JobEvent
        fields = ["at", "kind", "message", "details"]
        read_only_fields = fields


class PodLogSerializer(serializers.Serializer):
    pod = serializers.CharField()
    node = serializers.CharField(allow_blank=True, help_text="Empty until the pod is scheduled.")
    phase = serializers.CharField(allow_blank=True)
    lines = serializers.ListField(child=serializers.CharField(allow_blank=True))


class JobLogsSerializer(serializers.Serializer):
    """The last lines of each pod's log, pods by name."""

    pods = PodLogSerializer(many=True)


class LogsQuerySerializer(serializers.Serializer):
    tail = serializers.IntegerField(
        min_value=1, max_value=1000, default=50, help_text="Lines per pod, from the end."
    )


class AlternativeSerializer(serializers.Serializer):
    queue = serializers.CharField()
    capability = serializers.CharField()
    starts_at = serializers.DateTimeField()
    admitted_now = serializers.BooleanField()
    preemption = serializers.CharField(help_text="The queue's preemption class.")
    same_queue = serializers.BooleanField()
    same_capability = serializers.BooleanField()
    sharing = serializers.CharField(
        help_text="The queue's sharing mode when it differs from the job's queue's; else empty."
    )
    gpu_class = serializers.CharField(
        allow_blank=True, help_text="The GPU class it would start on; empty when unknown."
    )
    cost_per_hour = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="A preview's: what the job would cost per hour there (null: no rate).",
    )
    currency = serializers.CharField(required=False, allow_null=True)


class PreviewSerializer(serializers.Serializer):
    """What would happen to the request if it were submitted now (nothing is stored)."""

    starts_now = serializers.BooleanField()
    gpu_class = serializers.CharField(allow_null=True)
    capacity = serializers.CharField(
        allow_null=True, help_text="nominal, borrowed or reserved, when it starts now."
    )
    estimated_start = serializers.DateTimeField(
        allow_null=True, help_text="At the latest, as the job's own estimated_start will say."
    )
    likely_start = serializers.DateTimeField(
        allow_null=True, help_text="When it should start if jobs run as long as similar ones did."
    )
    start_range_low = serializers.DateTimeField(allow_null=True)
    start_range_high = serializers.DateTimeField(allow_null=True)
    why_unknown = serializers.CharField(allow_blank=True)
    estimated_start_note = serializers.CharField(
        allow_blank=True,
        help_text="Beside a start: what to know about it (a projection deep in a long queue), "
        "as the job's own estimated_start_note will say.",
    )
    reasons = PendingReasonSerializer(many=True, help_text="The binding reason first.")
    alternatives = AlternativeSerializer(many=True, help_text="Soonest first.")
    alternatives_untried = serializers.IntegerField(
        help_text="Other queue and capability class combinations not tried: a preview tries at "
        "most MAX_ALTERNATIVES_TRIED (each is a full plan of the cluster)."
    )
    cost_per_hour = serializers.CharField(
        allow_null=True, help_text="A decimal number as text: currency per hour on gpu_class."
    )
    currency = serializers.CharField(allow_null=True)
    preempts_own = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Ids of the submitter's own running jobs that starting it would preempt.",
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        # Declared here, not as a class attribute: one named "errors" would hide the
        # serializer's own ``errors`` property.
        fields = super().get_fields()
        fields["errors"] = serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            help_text="Always empty here: a request that breaks its queue's terms is a 400.",
        )
        return fields


class CheckpointSerializer(serializers.Serializer):
    recorded = serializers.BooleanField()
    at = serializers.DateTimeField()
