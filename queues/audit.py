"""The audit log of policy changes: django-auditlog's ``LogEntry``, stamped with where each change
came from.

Each entry says who (``actor``), when (``timestamp``), from where (``additional_data["source"]``:
``page``, ``admin``, ``file``, ``api``, or ``login`` with the identity provider in
``additional_data["via"]``; the request's address in ``remote_addr``), which object and old → new
values (``changes``). Policy models are registered in ``register_policy_models``
(called from the app config); save, delete and many-to-many signals record them.

Bulk writes fire no signals: ``bulk_create``, ``bulk_update`` and ``QuerySet.update`` used on a
policy object must call ``audit_created`` or ``audit_changed`` themselves. Node maintenance is an
action on the cluster, not a policy row: ``audit_action`` records it against the node. A team's
webhook is not registered (its row holds the signing secret, and is made on first view): its
service records each change of URL or events with ``audit_changed`` and a new secret with
``audit_action`` ("rotated", never the secret). The reconcile's mirror rows (jobs, nodes' facts,
usage) are not audited.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from auditlog.diff import model_instance_diff
from auditlog.models import LogEntry
from auditlog.registry import auditlog
from django.db.models import DecimalField, Model
from django.db.models.signals import pre_save
from django.http import HttpRequest, HttpResponse

from portal.formatting import display
from queues.models import (
    CapabilityClass,
    FairShareSettings,
    GpuClass,
    Queue,
    Quota,
    QuotaRequest,
    RateCard,
    RateCardWeight,
    Reservation,
    RoleGroups,
    SubmissionSettings,
    Team,
)


class AuditSource:
    PAGE = "page"
    ADMIN = "admin"
    FILE = "file"
    API = "api"
    # A login through an identity provider: the person's groups there gave or took a team or a
    # role (the entry's ``via`` names the provider).
    LOGIN = "login"

    ALL = (PAGE, ADMIN, FILE, API, LOGIN)


@dataclass(frozen=True)
class _Context:
    actor: Any
    source: str
    remote_addr: str | None
    via: str | None


_context: ContextVar[_Context | None] = ContextVar("queues_audit_context", default=None)


@contextlib.contextmanager
def audit_context(
    *, actor: Any, source: str, remote_addr: str | None = None, via: str | None = None
) -> Iterator[None]:
    """Entries written inside carry ``actor`` (a user, or None), ``source``, the address and,
    for a login, ``via``: the identity provider that vouched for the change. Contexts nest: the
    innermost wins, and the outer one is back when it ends."""
    outer = _context.get()
    if remote_addr is None and outer is not None:
        # An inner context (the API's, once DRF has found the token's user) keeps the request's
        # address that the middleware's outer context knows.
        remote_addr = outer.remote_addr
    token = _context.set(_Context(actor, source, remote_addr, via))
    try:
        yield
    finally:
        _context.reset(token)


def _stamp(sender: Any, instance: LogEntry, **kwargs: Any) -> None:
    context = _context.get()
    if context is None:
        return
    actor = context.actor
    if instance.actor_id is None and actor is not None and getattr(actor, "pk", None):
        instance.actor_id = actor.pk
        instance.actor_email = getattr(actor, "email", None) or None
    if instance.remote_addr is None:
        instance.remote_addr = context.remote_addr
    instance.additional_data = {**(instance.additional_data or {}), "source": context.source}
    if context.via:
        instance.additional_data["via"] = context.via


pre_save.connect(_stamp, sender=LogEntry, dispatch_uid="queues.audit.stamp")


class AuditSourceMiddleware:
    """Every request's writes are attributed to its user and to the door it came through: the
    Django admin, the REST API, or the portal's pages."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/admin/"):
            source = AuditSource.ADMIN
        elif request.path.startswith("/api/"):
            source = AuditSource.API
        else:
            source = AuditSource.PAGE
        user = getattr(request, "user", None)
        actor = user if user is not None and user.is_authenticated else None
        with audit_context(actor=actor, source=source, remote_addr=_client_address(request)):
            return self.get_response(request)


def _client_address(request: HttpRequest) -> str | None:
    address = request.META.get("REMOTE_ADDR") or None
    return address if isinstance(address, str) else None


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else display(value)


def _changed(changes: Mapping[str, tuple[Any, Any]]) -> dict[str, list[str | None]]:
    """Only the fields whose value changes, as text (empty and None alike: nothing)."""
    texts = {name: [_text(old), _text(new)] for name, (old, new) in changes.items()}
    return {name: pair for name, pair in texts.items() if pair[0] != pair[1]}


def quantize_decimals(instance: Model, **kwargs: Any) -> None:
    """Decimals as the database stores them (``8`` → ``8.000``), so that the audit compares like
    with like and records no change where only the spelling differs. A ``pre_save`` receiver
    connected before the audit's own."""
    for model_field in instance._meta.concrete_fields:
        if isinstance(model_field, DecimalField) and model_field.decimal_places is not None:
            value = getattr(instance, model_field.attname)
            if isinstance(value, Decimal) and value.is_finite():
                try:
                    quantized = value.quantize(Decimal(1).scaleb(-model_field.decimal_places))
                except InvalidOperation:
                    continue  # too large: the database refuses it with its own message
                setattr(instance, model_field.attname, quantized)


def audit_created(objects: Iterable[Model]) -> None:
    """Record rows written with ``bulk_create`` (they fire no signals)."""
    for obj in objects:
        quantize_decimals(obj)
        changes = model_instance_diff(None, obj)
        LogEntry.objects.log_create(
            obj, force_log=True, action=LogEntry.Action.CREATE, changes=changes or {}
        )


def audit_changed(obj: Model, changes: Mapping[str, tuple[Any, Any]]) -> None:
    """Record an update no signal records (written with ``QuerySet.update`` or ``bulk_update``,
    or of a model not registered here, such as a team's webhook): field → (old, new)."""
    LogEntry.objects.log_create(
        obj,
        force_log=True,
        action=LogEntry.Action.UPDATE,
        changes=_changed(changes),
    )


def audit_members(obj: Model, *, field: str, added: list[str], removed: list[str]) -> None:
    """Record names joining (``added``) or leaving (``removed``) a list of ``obj`` that no
    many-to-many signal reports, in the shape such a signal's entry has."""
    for operation, names in (("add", added), ("delete", removed)):
        if names:
            LogEntry.objects.log_create(
                obj,
                force_log=True,
                action=LogEntry.Action.UPDATE,
                changes={field: {"type": "m2m", "operation": operation, "objects": names}},
            )


def audit_action(
    obj: Model, *, what: str, changes: Mapping[str, tuple[Any, Any]], actor: Any = None
) -> None:
    """Record an action on an object the audit does not track by signals (a node's drain);
    ``actor`` names who did it where no request does (a service called from a command)."""
    LogEntry.objects.log_create(
        obj,
        force_log=True,
        action=LogEntry.Action.UPDATE,
        changes=_changed(changes),
        additional_data={"action": what},
        **({"actor": actor} if actor is not None else {}),
    )


def register_policy_models() -> None:
    """The objects whose every change is audited (called once, from the app config)."""
    for model in (
        GpuClass,
        CapabilityClass,
        Team,
        Queue,
        Quota,
        Reservation,
        RateCard,
        RateCardWeight,
        FairShareSettings,
        SubmissionSettings,
        QuotaRequest,
        RoleGroups,
    ):
        # Before the audit's receivers, so that they see the stored spelling of decimals.
        pre_save.connect(
            quantize_decimals, sender=model, dispatch_uid=f"quantize-{model._meta.label}"
        )
    for model in (
        GpuClass,
        CapabilityClass,
        Quota,
        Reservation,
        RateCard,
        RateCardWeight,
        FairShareSettings,
        SubmissionSettings,
        QuotaRequest,
        RoleGroups,
    ):
        if not auditlog.contains(model):
            auditlog.register(model)
    if not auditlog.contains(Team):
        auditlog.register(Team, m2m_fields={"members"})
    if not auditlog.contains(Queue):
        auditlog.register(
            Queue, m2m_fields={"allowed_gpu_classes", "allowed_capability_classes", "teams"}
        )
