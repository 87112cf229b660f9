"""Members' job pages: submit with a preview, my jobs, one job live, cancel, resubmit.

Thin: forms adapt, services decide, selectors read.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.http import PortalRequest
from portal.throttling import preview_wait
from queues.catalog.selectors import queues_visible_to, teams_for
from queues.cluster.adapter import ClusterUnreachable
from queues.cluster.prometheus import prometheus_from_settings
from queues.jobs.duty import job_duty
from queues.jobs.forms import JobForm
from queues.jobs.preview import Preview, job_alternatives, job_preview
from queues.jobs.requests import FORM_SECRET_PREFIX, JobRequest, resubmit_values
from queues.jobs.selectors import (
    job_cost_so_far,
    job_drain_notice,
    job_for,
    job_pod_logs,
    job_progress,
    jobs_visible_to,
    may_cancel,
)
from queues.jobs.services import (
    JobNotCancellable,
    JobRejected,
    job_cancel,
    job_submit,
    job_submit_once,
    submission_fingerprint,
)
from queues.models import ACTIVE_JOB_STATES, EventKind, Job, JobState

PAGE_SIZE = 25
LOG_LINES = 20


@login_required
def job_list(request: PortalRequest) -> HttpResponse:
    jobs = jobs_visible_to(request.user)
    state = request.GET.get("state", "")
    queue = request.GET.get("queue", "")
    team = request.GET.get("team", "")
    mine = request.GET.get("mine", "1") == "1"
    if state == "active":
        jobs = jobs.filter(state__in=ACTIVE_JOB_STATES)
    elif state in JobState.values:
        jobs = jobs.filter(state=state)
    if queue:
        jobs = jobs.filter(queue__name=queue)
    if team:
        jobs = jobs.filter(team__name=team)
    if mine:
        jobs = jobs.filter(owner=request.user)
    page = Paginator(jobs.order_by("-submitted_at", "-id"), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "jobs/list.html",
        {
            "page": page,
            "states": JobState.choices,
            "queues": queues_visible_to(request.user).order_by("name"),
            "teams": teams_for(request.user),
            "filters": {"state": state, "queue": queue, "team": team, "mine": mine},
        },
    )


@login_required
def job_new(request: PortalRequest) -> HttpResponse:
    if not teams_for(request.user).exists():
        # nobody submits outside a team: say so instead of offering an empty form
        return render(request, "jobs/no_team.html", status=200)
    initial: dict[str, Any] = {}
    source = request.GET.get("from")
    # ASCII digits only: "³" passes str.isdigit() but int() refuses it.
    if (
        source
        and source.isascii()
        and source.isdigit()
        and (copy := job_for(request.user, int(source)))
    ):
        initial, hidden = resubmit_values(copy)
        # a "would start sooner" suggestion followed: the same job in its queue and class
        for name in ("queue", "capability_class"):
            if request.GET.get(name):
                initial[name] = request.GET[name]
        if hidden and request.method == "GET":
            messages.warning(
                request,
                f"The copy does not carry the value{'s' if len(hidden) > 1 else ''} of "
                f"{', '.join(hidden)}: the portal never shows secret values. Reference a "
                f"Kubernetes Secret instead (NAME={FORM_SECRET_PREFIX}<secret>/<key>).",
            )
    form = JobForm(request.POST or None, user=request.user, initial=initial)
    preview = None
    if request.method == "POST" and form.is_valid():
        job_request = form.job_request()
        if "preview" in request.POST and (wait := preview_wait(request)) is not None:
            # Each preview simulates the whole cluster: pages share the API's preview rate. The
            # form comes back as it was, its preview box saying how long to wait.
            template = "jobs/_form.html" if request.htmx else "jobs/new.html"
            return render(
                request,
                template,
                {"form": form, "wait": wait, "submission_key": _form_key(request)},
            )
        if "preview" in request.POST:
            preview = job_preview(request=job_request)
            form.add_rule_errors(preview.errors)
        else:
            try:
                job, repeat = _submit_from_form(job_request, request.POST.get(FORM_KEY, ""))
            except JobRejected as rejected:
                form.add_rule_errors(rejected.errors)
            else:
                if repeat:
                    messages.info(
                        request,
                        f"This form was submitted already: it made job {job.pk}, shown here. "
                        "Nothing new was submitted.",
                    )
                else:
                    messages.success(request, f"Job {job.pk} submitted to queue {job.queue.name}.")
                return redirect("jobs:detail", job_id=job.pk)
    if request.method == "POST" and "preview" in request.POST and preview is None:
        # the form did not read: the preview box says so and the fields say what, as on submit
        preview = Preview(errors={name: [str(m) for m in e] for name, e in form.errors.items()})
    # htmx swaps the form and its preview box, never a whole page into the box
    template = "jobs/_form.html" if request.htmx else "jobs/new.html"
    return render(
        request,
        template,
        {"form": form, "preview": preview, "submission_key": _form_key(request)},
    )


# Each form the page hands out carries a key of its own: submitted again (Back, then Submit), it
# gets the job it made the first time, not a second one. Changed before submitting again, it is
# a new submission (the key is the form's and its fields').
FORM_KEY = "submission_key"
_FORM_KEY = re.compile(r"[0-9a-f]{32}")


def _form_key(request: PortalRequest) -> str:
    """The key of the form being shown: the one it was posted with, or a new one."""
    key = request.POST.get(FORM_KEY, "")
    return key if _FORM_KEY.fullmatch(key) else uuid.uuid4().hex


def _submit_from_form(job_request: JobRequest, form_key: str) -> tuple[Job, bool]:
    if not _FORM_KEY.fullmatch(form_key):  # a form from before keys, or hand-made: no key
        return job_submit(request=job_request), False
    fields = submission_fingerprint([job_request])[:16]
    submitted = job_submit_once(request=job_request, key=f"form-{form_key}-{fields}")
    return submitted.jobs[0], submitted.repeat


def _visible_job(request: PortalRequest, job_id: int) -> Job:
    job = job_for(request.user, job_id)
    if job is None:
        raise Http404("No such job.")
    return job


@login_required
def job_detail(request: PortalRequest, job_id: int) -> HttpResponse:
    job = _visible_job(request, job_id)
    now = timezone.now()
    events = list(job.events.all())
    context = {
        "job": job,
        "events": events,
        "starts": [e for e in events if e.kind == EventKind.STARTED],
        "may_cancel": may_cancel(request.user, job),
        "cost": job_cost_so_far(job, now=now),
        "progress": job_progress(job, now=now),
        "drain": job_drain_notice(job),
        "new_node": job.new_node_text(now),
    }
    # htmx polls the whole job page while the job is live; the partial stops polling once not
    if request.htmx:
        return render(request, "jobs/_page.html", context)
    # Prometheus is asked on the page's load only, not on each live refresh.
    context["duty"] = job_duty(prometheus_from_settings(), job_id=job.pk, now=now)
    return render(request, "jobs/detail.html", context)


@login_required
def job_logs_view(request: PortalRequest, job_id: int) -> HttpResponse:
    """The last lines of the job's pods' logs (the cluster is asked; the page loads this part
    after itself)."""
    job = _visible_job(request, job_id)
    try:
        logs, unavailable = job_pod_logs(job, tail_lines=LOG_LINES), ""
    except ClusterUnreachable as exc:
        logs, unavailable = [], str(exc)
    return render(request, "jobs/_logs.html", {"logs": logs, "unavailable": unavailable})


@login_required
def job_alternatives_view(request: PortalRequest, job_id: int) -> HttpResponse:
    """What would start a waiting job sooner: each what-if is a full plan, so the job page
    loads this part after itself instead of waiting for it."""
    job = _visible_job(request, job_id)
    if job.state == JobState.PENDING and (wait := preview_wait(request)) is not None:
        return render(request, "jobs/_preview_wait.html", {"wait": wait, "what": "alternatives"})
    explanation = job_alternatives(job=job)
    return render(
        request,
        "jobs/_alternatives.html",
        {"job": job, "alternatives": explanation.alternatives, "untried": explanation.untried},
    )


@login_required
@require_POST
def job_cancel_view(request: PortalRequest, job_id: int) -> HttpResponse:
    job = _visible_job(request, job_id)
    if not may_cancel(request.user, job):
        return HttpResponseForbidden("Only the job's owner or an admin may cancel it.")
    try:
        job_cancel(job=job, by=request.user)
    except JobNotCancellable:
        messages.error(request, f"Job {job.pk} has already ended ({job.state}).")
    else:
        messages.success(request, f"Job {job.pk} cancelled.")
    return redirect("jobs:detail", job_id=job.pk)
