"""Forms of the admin side and of quota requests: they check the shape of the input and name
the field; the policy service decides whether the values may be promised."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django import forms
from django.utils import timezone

from portal.formatting import (
    HIDDEN_CHARACTERS,
    NOT_ASCII_NUMBER,
    has_hidden_characters,
    is_ascii_number_text,
)
from queues.models import NAME_VALIDATOR, GpuClass, Queue, Team


class _Amount(forms.DecimalField):
    """An amount in ASCII digits (Decimal() would read fullwidth and Arabic-Indic ones)."""

    def to_python(self, value: Any) -> Decimal | None:  # type: ignore[override]
        if isinstance(value, str) and not is_ascii_number_text(value):
            raise forms.ValidationError(NOT_ASCII_NUMBER, code="invalid")
        return super().to_python(value)


class _PlainText(forms.CharField):
    """Text a person writes on several lines; no control or invisible formatting characters
    (a bidirectional override would make what an admin reads differ from what was written)."""

    def validate(self, value: Any) -> None:
        super().validate(value)
        if value and has_hidden_characters(value, line_breaks=True):
            raise forms.ValidationError(HIDDEN_CHARACTERS, code="hidden")


def _amount(label: str) -> forms.DecimalField:
    return _Amount(
        label=label,
        min_value=Decimal(0),
        max_digits=10,
        decimal_places=3,
        help_text="GPU-equivalents (a MIG 1g.10gb slice is 1/7 ≈ 0.143)",
    )


class QuotaForm(forms.Form):
    nominal = _amount("Nominal")
    borrowing_limit = _amount("Borrowing limit")


class DrainForm(forms.Form):
    nodes = forms.CharField(
        required=False, help_text="Node names, separated by commas or spaces", max_length=4000
    )
    rack = forms.CharField(required=False, max_length=100)
    gpu_class = forms.ModelChoiceField(
        GpuClass.objects.active(), required=False, to_field_name="name", label="GPU class"
    )
    reason = forms.CharField(max_length=300)
    until = forms.DateTimeField(
        required=False,
        label="Expected end (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    deadline = forms.DateTimeField(
        required=False,
        label="Preempt running work after (UTC)",
        help_text="Empty: running work may finish",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def clean_nodes(self) -> list[str]:
        return sorted({n for n in self.cleaned_data["nodes"].replace(",", " ").split() if n})

    def _future(self, field: str) -> datetime | None:
        value: datetime | None = self.cleaned_data.get(field)
        if value is not None and value <= timezone.now():
            raise forms.ValidationError("must be in the future")
        return value

    def clean_until(self) -> datetime | None:
        return self._future("until")

    def clean_deadline(self) -> datetime | None:
        return self._future("deadline")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not (data.get("nodes") or data.get("rack") or data.get("gpu_class")):
            raise forms.ValidationError("Name the nodes to drain: by name, rack or GPU class.")
        return data


class QuotaRequestForm(forms.Form):
    team = forms.ModelChoiceField(Team.objects.none(), to_field_name="name")
    gpu_class = forms.ModelChoiceField(
        GpuClass.objects.active(), to_field_name="name", label="GPU class"
    )
    nominal = _amount("Nominal wanted")
    borrowing_limit = _amount("Borrowing limit wanted")
    justification = _PlainText(widget=forms.Textarea(attrs={"rows": 4}), max_length=4000)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        team_field = self.fields["team"]
        assert isinstance(team_field, forms.ModelChoiceField)
        team_field.queryset = Team.objects.active().filter(members=user).order_by("name")


class ApproveForm(forms.Form):
    """What an admin grants: as asked unless she lowers it, and then why."""

    nominal = _amount("Nominal granted")
    borrowing_limit = _amount("Borrowing limit granted")
    reason = _PlainText(
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=4000,
        required=False,
        help_text="Needed when you grant less than was asked: the member sees it.",
    )


class DeclineForm(forms.Form):
    reason = _PlainText(widget=forms.Textarea(attrs={"rows": 3}), max_length=4000)


class ReservationForm(forms.Form):
    """A reservation's fields; whether it may be promised is the policy service's to say."""

    name = forms.CharField(max_length=63, validators=[NAME_VALIDATOR])
    team = forms.ModelChoiceField(Team.objects.active(), to_field_name="name")
    queue = forms.ModelChoiceField(
        Queue.objects.active(),
        to_field_name="name",
        required=False,
        help_text="Empty: any queue of the team",
    )
    gpu_class = forms.ModelChoiceField(
        GpuClass.objects.active(), to_field_name="name", label="GPU class"
    )
    amount = forms.DecimalField(
        min_value=Decimal("0.001"), max_digits=10, decimal_places=3, help_text="GPU-equivalents"
    )
    starts_at = forms.DateTimeField(
        required=False,
        label="Starts (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="Empty start and end: a standing reservation",
    )
    ends_at = forms.DateTimeField(
        required=False,
        label="Ends (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            self.fields["name"].disabled = True

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        starts_at, ends_at = data.get("starts_at"), data.get("ends_at")
        if (starts_at is None) != (ends_at is None) and not self.errors:
            missing = "ends_at" if ends_at is None else "starts_at"
            self.add_error(missing, "a window needs a start and an end (both empty: standing)")
        elif starts_at and ends_at and ends_at <= starts_at:
            self.add_error("ends_at", "must be after the start")
        return data

    def policy_fields(self) -> dict[str, Any]:
        """The reservation as the policy file spells it."""
        data = self.cleaned_data
        return {
            "team": data["team"].name,
            "queue": data["queue"].name if data["queue"] else None,
            "gpu_class": data["gpu_class"].name,
            "amount": data["amount"],
            "starts_at": data["starts_at"],
            "ends_at": data["ends_at"],
        }
