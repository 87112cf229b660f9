"""The submit form: reads what a person types into a ``JobRequest``. Every rule on the values
lives in ``queues/jobs/requests.py``, so the form and the API answer alike."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.db.models import QuerySet

from portal.formatting import (
    format_cpu,
    format_duration,
    format_memory,
    is_ascii_number_text,
    parse_cpu_millicores,
    parse_duration,
    parse_memory_mib,
)
from queues.admission.pods import DEFAULT_POD_CPU_MILLICORES, DEFAULT_POD_MEMORY_MIB
from queues.catalog.selectors import queues_visible_to, teams_for
from queues.cluster.secrets import EnvValue, SecretKeyRef, env_of_json
from queues.jobs.requests import (
    FORM_SECRET_PREFIX,
    MAX_IMAGE_LENGTH,
    MAX_NAME_LENGTH,
    NO_SUCH_NAME,
    NOT_A_WHOLE_NUMBER,
    JobRequest,
    Syntax,
    job_request_errors,
)
from queues.models import CapabilityClass, Queue, Team


class DurationField(forms.CharField):
    """A duration written as ``4h``, ``30m``, ``1h30m``, ``2d``."""

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if not text:
            return None
        try:
            return parse_duration(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def prepare_value(self, value: Any) -> Any:
        return format_duration(value) if hasattr(value, "total_seconds") else value


class AmountField(forms.CharField):
    """An amount read by ``parse`` (cores or millicores; GiB or MiB) and shown by ``show``."""

    def __init__(self, *, parse: Any, show: Any, **kwargs: Any) -> None:
        self.parse, self.show = parse, show
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if not text:
            return None
        try:
            return self.parse(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def prepare_value(self, value: Any) -> Any:
        return self.show(value) if isinstance(value, int) else value


class LinesField(forms.Field):
    """One item per line: the command and its arguments are a list, never a shell string."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value: Any) -> list[str]:
        text = "" if value in self.empty_values else str(value)
        return [line.strip() for line in text.splitlines() if line.strip()]

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list) else value


class EnvField(forms.Field):
    """``NAME=value`` per line; ``NAME=secret:<secret>/<key>`` takes the value from a key of a
    Kubernetes Secret. A plain value that itself starts with ``secret:`` is written with a
    backslash before it (``NAME=\\secret:…``), so that every request the API takes reads back
    the same here."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value: Any) -> dict[str, EnvValue]:
        env: dict[str, EnvValue] = {}
        text = "" if value in self.empty_values else str(value)
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, val = line.partition("=")
            name, val = name.strip(), val.strip()
            if not sep:
                raise forms.ValidationError(
                    f"line {number}: write NAME=value, or NAME={FORM_SECRET_PREFIX}<secret>/<key> "
                    "for a key of a Secret"
                )
            if val.startswith(FORM_SECRET_PREFIX):
                secret, slash, key = val.removeprefix(FORM_SECRET_PREFIX).partition("/")
                if not (secret.strip() and slash and key.strip()):
                    raise forms.ValidationError(
                        f"line {number}: write {name}={FORM_SECRET_PREFIX}<secret>/<key>, e.g. "
                        f"{name}={FORM_SECRET_PREFIX}wandb/api-key (a plain value starting with "
                        f"{FORM_SECRET_PREFIX} is written \\{FORM_SECRET_PREFIX}…)"
                    )
                env[name] = SecretKeyRef(secret.strip(), key.strip())
            elif val.lstrip("\\").startswith(FORM_SECRET_PREFIX):
                env[name] = val[1:]  # one backslash less: the value as it is
            else:
                env[name] = val
        return env

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return "\n".join(f"{name}={_env_text(v)}" for name, v in env_of_json(value).items())
        return value


def _env_text(value: EnvValue) -> str:
    """A value as the form writes it (the inverse of ``EnvField.to_python``)."""
    if isinstance(value, SecretKeyRef):
        return f"{FORM_SECRET_PREFIX}{value.secret}/{value.key}"
    if value.lstrip("\\").startswith(FORM_SECRET_PREFIX):
        return "\\" + value
    return value


class QueueFilteredSelect(forms.Select):
    """A select whose options name the queues that allow them (``data-queues``)."""

    def __init__(self, *, allowed: dict[str, list[str]]) -> None:
        super().__init__()
        self.allowed = allowed

    def create_option(self, name: str, value: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option = super().create_option(name, value, *args, **kwargs)
        if str(value) in self.allowed:
            option["attrs"]["data-queues"] = " ".join(self.allowed[str(value)])
        return option


class _WholeNumber(forms.IntegerField):
    """A whole number in ASCII digits (int() would read fullwidth and Arabic-Indic ones)."""

    def to_python(self, value: Any) -> int | None:
        if isinstance(value, str) and not is_ascii_number_text(value):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


def _whole_number(**kwargs: Any) -> forms.IntegerField:
    """A number field that reads only; its bounds are the request's rules."""
    return _WholeNumber(
        error_messages={"invalid": NOT_A_WHOLE_NUMBER},
        widget=forms.NumberInput(attrs={"min": 1} if kwargs.pop("positive", True) else {}),
        **kwargs,
    )


def _named(queryset: QuerySet[Any], what: str) -> forms.ModelChoiceField:
    """An object by its name. Any active one is read (as the API reads it), so a team the user
    is not in gets the request rule's answer; the widget offers only the user's own."""
    return forms.ModelChoiceField(
        queryset=queryset,
        to_field_name="name",
        error_messages={"invalid_choice": NO_SUCH_NAME.format(what=what, value="%(value)s")},
    )


class JobForm(forms.Form):
    name = forms.CharField(
        required=False,
        help_text="For you; optional.",
        widget=forms.TextInput(attrs={"maxlength": MAX_NAME_LENGTH}),
    )
    team = _named(Team.objects.active(), "team")
    queue = _named(Queue.objects.active(), "queue")
    capability_class = _named(CapabilityClass.objects.active(), "capability class")
    pods = _whole_number(initial=1, help_text="More than one: a gang.")
    gpus_per_pod = _whole_number(
        initial=1,
        label="GPUs per pod",
        help_text="Whole GPUs, MIG slices or time-slice replicas, as the queue shares them.",
    )
    cpu_millicores_per_pod = AmountField(
        parse=parse_cpu_millicores,
        show=format_cpu,
        initial=DEFAULT_POD_CPU_MILLICORES,
        label="CPU per pod",
        help_text="Cores (4, 0.5) or millicores (500m).",
    )
    memory_mib_per_pod = AmountField(
        parse=parse_memory_mib,
        show=format_memory,
        initial=DEFAULT_POD_MEMORY_MIB,
        label="Memory per pod",
        help_text="GiB (32 GiB, or just 32) or MiB (512 MiB).",
    )
    declared_gpu_memory_gb = _whole_number(
        required=False,
        label="GPU memory used (GB)",
        help_text="Required on time-sliced queues: the GPU's memory is shared.",
    )
    runtime_limit = DurationField(required=False, help_text="e.g. 4h; empty: the queue's default.")
    image = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"maxlength": MAX_IMAGE_LENGTH})
    )
    command = LinesField(required=False, help_text="One item per line.")
    args = LinesField(required=False, label="Arguments", help_text="One per line.")
    env = EnvField(
        required=False,
        label="Environment",
        help_text="NAME=value per line. A secret (API key, token, password) is never typed here: "
        "put it in a Kubernetes Secret in your team's namespace and write "
        f"NAME={FORM_SECRET_PREFIX}<secret>/<key>, e.g. WANDB_API_KEY={FORM_SECRET_PREFIX}wandb/"
        "api-key; the portal never sees its value.",
    )
    env_from = LinesField(
        required=False,
        label="Environment from Secrets",
        help_text="Kubernetes Secrets in your team's namespace, one per line: every key of each "
        "becomes a variable.",
    )
    checkpoint_interval = DurationField(
        required=False, help_text="Queues that may preempt require one; empty: the queue's."
    )
    priority = _whole_number(required=False, positive=False, help_text="Within the queue's bounds.")

    # The form's sections, in order: what runs, its resources, the queue and its terms.
    GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
        (
            "Queue and terms",
            (
                "team",
                "queue",
                "capability_class",
                "runtime_limit",
                "checkpoint_interval",
                "priority",
            ),
        ),
        (
            "Resources",
            (
                "pods",
                "gpus_per_pod",
                "cpu_millicores_per_pod",
                "memory_mib_per_pod",
                "declared_gpu_memory_gb",
            ),
        ),
        ("What runs", ("name", "image", "command", "args", "env", "env_from")),
    )

    def groups(self) -> list[tuple[str, list[forms.BoundField]]]:
        return [(title, [self[name] for name in names]) for title, names in self.GROUPS]

    def __init__(self, *args: Any, user: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        teams = list(teams_for(user))
        self.queues = list(queues_visible_to(user).order_by("-priority", "name"))
        self.fields["team"].widget.choices = [("", "---------")] + [(t.name, str(t)) for t in teams]
        self.fields["queue"].widget.choices = [("", "---------")] + [
            (q.name, str(q)) for q in self.queues
        ]
        # Each capability class says which of the user's queues allow it, so the page offers
        # only those of the chosen queue (static/portal/jobform.js).
        allowed: dict[str, list[str]] = {}
        for queue in self.queues:
            for capability in queue.allowed_capability_classes.all():
                allowed.setdefault(capability.name, []).append(queue.name)
        self.fields["capability_class"].widget = QueueFilteredSelect(allowed=allowed)
        self.fields["capability_class"].widget.choices = [("", "---------")] + [
            (name, name) for name in sorted(allowed)
        ]
        if len(teams) == 1:
            self.fields["team"].initial = teams[0].name

    def clean(self) -> dict[str, Any]:
        """While some field is unreadable the whole request cannot be judged, but every rule on
        the fields that were read can: report those at once too (a rule about a field already
        in error is left out; the unreadable fields count as their defaults)."""
        data = super().clean() or {}
        named = ("team", "queue", "capability_class")
        if self.errors and all(data.get(name) for name in named):
            readable = {
                n: v for n, v in data.items() if n not in self.errors and v not in (None, "")
            }
            request = JobRequest.of(owner=self.user, values=readable, syntax=Syntax.FORM)
            failed = set(self.errors)
            for field_name, messages in job_request_errors(request).items():
                if field_name in failed:
                    continue
                for message in messages:
                    self.add_error(field_name if field_name in self.fields else None, message)
        return data

    def job_request(self) -> JobRequest:
        return JobRequest.of(owner=self.user, values=self.cleaned_data, syntax=Syntax.FORM)

    def add_rule_errors(self, errors: dict[str, list[str]]) -> None:
        """Put the request's refusals under the fields they concern."""
        for field_name, messages in errors.items():
            for message in messages:
                self.add_error(field_name if field_name in self.fields else None, message)
