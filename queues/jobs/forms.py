"""The submit form: adapts what a person types to a ``JobRequest``; the rules live in services."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from portal.formatting import format_duration, parse_duration
from queues.catalog.selectors import queues_visible_to, teams_of
from queues.jobs.requests import JobRequest
from queues.models import CapabilityClass, Queue, Team

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


class LinesField(forms.CharField):
    """One item per line: the command and its arguments are a list, never a shell string."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value: Any) -> list[str]:
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list) else value


class EnvField(forms.CharField):
    """``NAME=value`` per line."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value: Any) -> dict[str, str]:
        env: dict[str, str] = {}
        for number, line in enumerate((super().to_python(value) or "").splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, val = line.partition("=")
            name = name.strip()
            if not sep or not _ENV_NAME.match(name):
                raise forms.ValidationError(
                    f"line {number}: write NAME=value, with a name of letters, digits and _"
                )
            env[name] = val.strip()
        return env

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return "\n".join(f"{k}={v}" for k, v in value.items())
        return value


class JobForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, help_text="For you; optional.")
    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="name")
    queue = forms.ModelChoiceField(queryset=Queue.objects.none(), to_field_name="name")
    capability_class = forms.ModelChoiceField(
        queryset=CapabilityClass.objects.active(), to_field_name="name"
    )
    pods = forms.IntegerField(min_value=1, initial=1, help_text="More than one: a gang.")
    gpus_per_pod = forms.IntegerField(
        min_value=1,
        initial=1,
        label="GPUs per pod",
        help_text="Whole GPUs, MIG slices or time-slice replicas, as the queue shares them.",
    )
    cpu_millicores_per_pod = forms.IntegerField(
        min_value=1, initial=4000, label="CPU per pod (millicores)"
    )
    memory_mib_per_pod = forms.IntegerField(
        min_value=1, initial=32768, label="Memory per pod (MiB)"
    )
    declared_gpu_memory_gb = forms.IntegerField(
        min_value=1,
        required=False,
        label="GPU memory used (GB)",
        help_text="Required on time-sliced queues: the GPU's memory is shared.",
    )
    runtime_limit = DurationField(required=False, help_text="e.g. 4h; empty: the queue's default.")
    image = forms.CharField(max_length=500)
    command = LinesField(required=False, help_text="One item per line.")
    args = LinesField(required=False, label="Arguments", help_text="One per line.")
    env = EnvField(required=False, label="Environment", help_text="NAME=value per line.")
    checkpoint_interval = DurationField(
        required=False, help_text="Queues that may preempt require one; empty: the queue's."
    )
    priority = forms.IntegerField(required=False, help_text="Within the queue's bounds.")

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["team"].queryset = teams_of(user)
        self.fields["queue"].queryset = queues_visible_to(user).order_by("-priority", "name")
        teams = list(self.fields["team"].queryset)
        if len(teams) == 1:
            self.fields["team"].initial = teams[0].name

    def job_request(self) -> JobRequest:
        data = self.cleaned_data
        return JobRequest(
            owner=self.user,
            team=data["team"],
            queue=data["queue"],
            capability_class=data["capability_class"],
            image=data["image"],
            command=data["command"],
            args=data["args"],
            env=data["env"],
            pods=data["pods"],
            gpus_per_pod=data["gpus_per_pod"],
            runtime_limit=data["runtime_limit"],
            priority=data["priority"],
            checkpoint_interval=data["checkpoint_interval"],
            declared_gpu_memory_gb=data["declared_gpu_memory_gb"],
            cpu_millicores_per_pod=data["cpu_millicores_per_pod"],
            memory_mib_per_pod=data["memory_mib_per_pod"],
            name=data["name"],
        )

    def add_rule_errors(self, errors: dict[str, list[str]]) -> None:
        """Put the queue's refusals under the fields they concern."""
        for field_name, messages in errors.items():
            for message in messages:
                self.add_error(field_name if field_name in self.fields else None, message)
