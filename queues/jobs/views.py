"""Members' job pages: submit with a preview, my jobs, one job live, cancel, resubmit.

Thin: forms adapt, services decide, selectors read.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.http import PortalRequest
from queues.catalog.selectors import queues_visible_to, teams_of
from queues.jobs.forms import JobForm
from queues.jobs.preview import job_alternatives, job_preview
from queues.jobs.requests import JobRequest
from queues.jobs.selectors import job_cost_so_far, job_for, jobs_visible_to, may_cancel
from queues.jobs.services import JobNotCancellable, JobRejected, job_cancel, job_submit
from queues.models import ACTIVE_JOB_STATES, Job, JobState

PAGE_SIZE = 25


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
            "teams": teams_of(request.user),
            "filters": {"state": state, "queue": queue, "team": team, "mine": mine},
        },
    )


@login_required
def job_new(request: PortalRequest) -> HttpResponse:
    initial = {}
    source = request.GET.get("from")
    if source and source.isdigit() and (copy := job_for(request.user, int(source))):
        initial = JobRequest.of_job(copy).values()
    form = JobForm(request.POST or None, user=request.user, initial=initial)
    preview = None
    if request.method == "POST" and form.is_valid():
        job_request = form.job_request()
        if "preview" in request.POST:
            preview = job_preview(request=job_request)
            form.add_rule_errors(preview.errors)
        else:
            try:
                job = job_submit(request=job_request)
            except JobRejected as rejected:
                form.add_rule_errors(rejected.errors)
            else:
                messages.success(request, f"Job {job.pk} submitted to queue {job.queue.name}.")
                return redirect("jobs:detail", job_id=job.pk)
    template = "jobs/_preview.html" if request.htmx and preview is not None else "jobs/new.html"
    return render(request, template, {"form": form, "preview": preview})


def _visible_job(request: PortalRequest, job_id: int) -> Job:
    job = job_for(request.user, job_id)
    if job is None:
        raise Http404("No such job.")
    return job


@login_required
def job_detail(request: PortalRequest, job_id: int) -> HttpResponse:
    job = _visible_job(request, job_id)
    context = {
        "job": job,
        "events": job.events.all(),
        "may_cancel": may_cancel(request.user, job),
        "cost": job_cost_so_far(job, now=timezone.now()),
    }
    if request.htmx:
        return render(request, "jobs/_status.html", context)
    return render(request, "jobs/detail.html", context)


@login_required
def job_alternatives_view(request: PortalRequest, job_id: int) -> HttpResponse:
    """What would start a waiting job sooner: each what-if is a full plan, so the job page
    loads this part after itself instead of waiting for it."""
    job = _visible_job(request, job_id)
    explanation = job_alternatives(job_id=job.pk) if job.state == JobState.PENDING else None
    return render(
        request,
        "jobs/_alternatives.html",
        {
            "job": job,
            "alternatives": explanation.alternatives if explanation else (),
            "untried": explanation.untried if explanation else 0,
        },
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
