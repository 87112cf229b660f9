"""REST endpoints of jobs. Thin: they adapt HTTP to one service or selector each.

Visibility is ``jobs_visible_to``'s: a job of a team the caller is not in is 404, never 403, on
every endpoint. 403 is kept for "you can see it but may not do that" (cancelling a teammate's job).

``POST /api/jobs/<id>/checkpoint/`` is the one endpoint a job's own pods call: it accepts only the
job token the portal put in their ``GPUPORTAL_JOB_TOKEN`` (``Authorization: Bearer <token>``),
and only for that job. Personal tokens and sessions are refused there (401), and no other
endpoint accepts a job token.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, NoReturn

import django_filters
import django_filters.fields
from django import forms
from django.core.validators import RegexValidator
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.decorators import action
from rest_framework.exceptions import (
    AuthenticationFailed,
    NotAuthenticated,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from portal.http import signed_in
from portal.parsers import PortalJSONParser
from portal.schema import ErrorDetailSerializer
from portal.throttling import PortalUserRateThrottle, PreviewRateThrottle
from portal.tokens import job_id_of_token
from queues.cluster.adapter import ClusterUnreachable
from queues.jobs.preview import job_preview
from queues.jobs.selectors import job_for, job_pod_logs, jobs_visible_to, may_cancel
from queues.jobs.serializers import (
    CheckpointSerializer,
    JobBatchSerializer,
    JobBatchSubmitSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobLogsSerializer,
    JobSerializer,
    JobSubmitSerializer,
    LogsQuerySerializer,
    PreviewSerializer,
)
from queues.jobs.services import (
    SUBMISSION_KEY_LIFETIME,
    BatchRejected,
    JobNotCancellable,
    JobRejected,
    SubmissionKeyReused,
    job_cancel,
    job_checkpoint,
    job_submit,
    job_submit_batch,
    job_submit_batch_once,
    job_submit_once,
)
from queues.models import FINISHED_JOB_STATES, NAME_PATTERN, Job, JobState

# Ids beyond a 64-bit integer cannot name a row; refusing them early keeps the database from
# raising an overflow instead of answering "not found".
JOB_ID = re.compile(r"[0-9]{1,18}")
# Names of queues and teams as the policy allows them (documented for the list's filters).
# JSON Schema patterns search; anchored, they say the same as NAME_PATTERN.fullmatch.
NAME_SCHEMA_PATTERN = f"^{NAME_PATTERN}$"


def _job_id(value: Any) -> int | None:
    text = str(value)
    return int(text) if JOB_ID.fullmatch(text) else None


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorDetailSerializer, description=description)


# --- Submitting once ----------------------------------------------------------------------------

IDEMPOTENCY_KEY = "Idempotency-Key"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # printable ASCII, no spaces
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_KEY,
    str,
    location=OpenApiParameter.HEADER,
    required=False,
    description=(
        "Any string of 1 to 255 printable ASCII characters, new for each new submission (a "
        "UUID, say). Sent again with the same body within "
        f"{int(SUBMISSION_KEY_LIFETIME.total_seconds() // 3600)} hours (a retry after a "
        "time-out), it stores nothing new: the answer is the first submission's jobs, 201 with "
        "`Idempotent-Replayed: true`. With a different body: 422."
    ),
)
KEY_REUSED = _error("The `Idempotency-Key` was used for a different submission.")


def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` (None: none sent); a malformed one is a 400 naming it."""
    key = request.headers.get(IDEMPOTENCY_KEY)
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise ValidationError(
            {IDEMPOTENCY_KEY: ["must be 1 to 255 printable ASCII characters without spaces"]}
        )
    return key


def _key_reused(exc: SubmissionKeyReused) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_422_UNPROCESSABLE_ENTITY)


def _created(data: Any, *, repeat: bool) -> Response:
    response = Response(data, status=status.HTTP_201_CREATED)
    if repeat:
        response["Idempotent-Replayed"] = "true"
    return response


class _Present:
    """A query parameter that, when given, must not be empty: leave it out to not filter."""

    def clean(self, value: Any) -> Any:
        if value == "":
            raise forms.ValidationError("must not be empty (leave the parameter out instead)")
        return super().clean(value)  # type: ignore[misc]


class _NameField(_Present, forms.CharField):
    default_validators = [
        RegexValidator(
            rf"\A{NAME_PATTERN}\Z", "not a name (lowercase letters, digits, '.' and '-')"
        )
    ]


class _ChoiceField(_Present, django_filters.fields.ChoiceField):
    pass


class NameFilter(django_filters.CharFilter):
    field_class = _NameField


class StrictChoiceFilter(django_filters.ChoiceFilter):
    field_class = _ChoiceField


class JobFilter(django_filters.FilterSet):
    """``state``, ``queue`` and ``team`` (names; an unknown name matches nothing) and
    ``owner=me``. A parameter given empty or malformed is a 400 naming it."""

    state = StrictChoiceFilter(choices=JobState.choices)
    queue = NameFilter(field_name="queue__name")
    team = NameFilter(field_name="team__name")
    owner = StrictChoiceFilter(
        choices=[("me", "me")], method="filter_owner", help_text="`me`: only your own jobs."
    )

    class Meta:
        model = Job
        fields = ["state", "queue", "team", "owner"]

    def filter_owner(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(owner=self.request.user) if value == "me" else queryset


JOB_NOT_FOUND = _error("No such job, or a job of a team you are not in.")


@extend_schema(tags=["jobs"])
class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your own and your teams' jobs (admins: every job): submit, preview, follow, cancel."""

    serializer_class = JobSerializer
    filterset_class = JobFilter
    parser_classes = [PortalJSONParser]  # commands and environments are lists and objects
    queryset = Job.objects.none()  # the real one is per caller: see get_queryset

    def get_queryset(self) -> QuerySet[Job]:
        return jobs_visible_to(signed_in(self.request.user)).order_by("-submitted_at", "-id")

    def get_object(self) -> Job:
        """The job named in the URL if the caller may see it; 404 otherwise."""
        job_id = _job_id(self.kwargs["pk"])
        job = job_for(signed_in(self.request.user), job_id) if job_id is not None else None
        if job is None:
            raise NotFound()
        return job

    @extend_schema(
        summary="Your and your teams' jobs, newest first",
        description="Filter by `state`, `queue` and `team` (names), or `owner=me`.",
        parameters=[
            OpenApiParameter(
                "queue", str, pattern=NAME_SCHEMA_PATTERN, description="A queue's name."
            ),
            OpenApiParameter(
                "team", str, pattern=NAME_SCHEMA_PATTERN, description="A team's name."
            ),
        ],
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        summary="One job: where it stands, why it waits, what happened to it and its cost",
        responses={200: JobDetailSerializer, 404: JOB_NOT_FOUND},
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(JobDetailSerializer(self.get_object()).data)

    @extend_schema(
        summary="Submit a job",
        description=(
            "Accepted only within its queue's terms. A 400 names every field it refuses, "
            "with every reason; nothing is stored then."
        ),
        request=JobSubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            201: JobSerializer,
            400: _error("Field → list of messages."),
            422: KEY_REUSED,
        },
    )
    def create(self, request: Request) -> Response:
        key = idempotency_key(request)
        body = JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job_request = body.to_request(owner=signed_in(request.user))
        try:
            if key is None:
                job, repeat = job_submit(request=job_request), False
            else:
                submitted = job_submit_once(request=job_request, key=key)
                job, repeat = submitted.jobs[0], submitted.repeat
        except JobRejected as exc:
            raise ValidationError(exc.errors) from exc
        except SubmissionKeyReused as exc:
            return _key_reused(exc)
        return _created(JobSerializer(job).data, repeat=repeat)

    @extend_schema(
        summary="Submit several jobs at once (all or none)",
        description=(
            "A sweep in one request: each job as `POST /api/jobs/` takes one, checked against "
            "its queue's terms the same way. Either every job is stored (201, in the order "
            "given) or none is: a 400 lists, under `jobs`, each job's field errors in order "
            "(`{}` for the jobs that were fine)."
        ),
        request=JobBatchSubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            201: JobBatchSerializer,
            400: _error("`jobs`: one object of field → messages per job, in order."),
            422: KEY_REUSED,
        },
    )
    @action(detail=False, methods=["post"], filter_backends=[], pagination_class=None)
    def batch(self, request: Request) -> Response:
        key = idempotency_key(request)
        body = JobBatchSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        requests = body.to_requests(owner=signed_in(request.user))
        try:
            if key is None:
                jobs, repeat = job_submit_batch(requests=requests), False
            else:
                submitted = job_submit_batch_once(requests=requests, key=key)
                jobs, repeat = submitted.jobs, submitted.repeat
        except BatchRejected as exc:
            raise ValidationError({"jobs": {str(i): e for i, e in exc.errors.items()}}) from exc
        except SubmissionKeyReused as exc:
            return _key_reused(exc)
        return _created(JobBatchSerializer({"jobs": jobs}).data, repeat=repeat)

    @extend_schema(
        summary="Preview a submission (a dry run: nothing is stored)",
        description=(
            "Would the request start now or when, on which GPU class, why it would wait, what "
            "would start it sooner, and its cost per hour. Same body as submitting."
        ),
        request=JobSubmitSerializer,
        responses={200: PreviewSerializer, 400: _error("Field → list of messages.")},
    )
    @action(
        detail=False,
        methods=["post"],
        filter_backends=[],
        pagination_class=None,
        # Each preview simulates the whole cluster: a rate of its own besides the user's.
        throttle_classes=[*api_settings.DEFAULT_THROTTLE_CLASSES, PreviewRateThrottle],
    )
    def preview(self, request: Request) -> Response:
        body = JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        preview = job_preview(request=body.to_request(owner=signed_in(request.user)))
        if preview.errors:
            raise ValidationError(preview.errors)
        return Response(preview.to_dict())

    @extend_schema(
        summary="Cancel a job (its owner or an admin)",
        request=None,
        responses={
            200: JobSerializer,
            403: _error("You see the job (your team's) but are neither its owner nor admin."),
            404: JOB_NOT_FOUND,
            409: _error("The job has already ended."),
        },
    )
    @action(detail=True, methods=["post"], filter_backends=[], pagination_class=None)
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        if not may_cancel(signed_in(request.user), job):
            raise PermissionDenied(
                f"only the job's owner ({job.owner.get_username()}) or an admin may cancel it"
            )
        try:
            job_cancel(job=job, by=signed_in(request.user))
        except JobNotCancellable:
            job.refresh_from_db(fields=["state"])
            if job.state in FINISHED_JOB_STATES:
                detail = f"job {job.pk} has already ended ({job.state}): nothing to cancel"
            else:
                detail = f"job {job.pk} changed state meanwhile (now {job.state}); try again"
            return Response({"detail": detail}, status=status.HTTP_409_CONFLICT)
        return Response(JobSerializer(job_for(signed_in(request.user), job.pk)).data)

    @extend_schema(
        summary="The job's timeline, oldest first",
        responses={200: JobEventSerializer(many=True), 404: JOB_NOT_FOUND},
    )
    @action(detail=True, methods=["get"], filter_backends=[])
    def events(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        page = self.paginate_queryset(job.events.order_by("at", "id"))
        return self.get_paginated_response(JobEventSerializer(page, many=True).data)

    @extend_schema(
        summary="The last lines of each of the job's pods' logs",
        description="Read from the cluster now; pods that have not started have no lines.",
        parameters=[LogsQuerySerializer],
        responses={
            200: JobLogsSerializer,
            400: _error("`tail` is not a whole number from 1 to 1000."),
            404: JOB_NOT_FOUND,
            503: _error("The cluster does not answer; try again later."),
        },
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def logs(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        query = LogsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            pods = job_pod_logs(job, tail_lines=query.validated_data["tail"])
        except ClusterUnreachable as exc:
            return Response(
                {"detail": f"the cluster does not answer, try again later ({exc})"},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response({"pods": [asdict(p) for p in pods]})


# --- The job's own token ---------------------------------------------------------------------


class JobPrincipal:
    """Who calls with a job token: the job itself, not a person. Has no user's rights."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id

    def get_username(self) -> str:
        return f"job {self.job_id}"

    def __str__(self) -> str:
        return self.get_username()


class JobTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <job token>`` → the job it was issued for.

    No header: not authenticated (401). A personal token (``Token …``) or an invalid bearer
    token: 401 saying so. Only ``JobCheckpointView`` lists this class."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[JobPrincipal, str] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None
        keyword = header[0].lower()
        if keyword == b"token":
            raise AuthenticationFailed(
                "a personal token is not accepted here: a job reports its checkpoints with "
                "its own token (Authorization: Bearer $GPUPORTAL_JOB_TOKEN)"
            )
        if keyword != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise AuthenticationFailed("Authorization: Bearer takes exactly one token")
        try:
            # ASCII only: job tokens are, and job_id_of_token trips over digits like "²".
            token = header[1].decode("ascii")
        except UnicodeError as exc:
            raise AuthenticationFailed("invalid job token") from exc
        job_id = job_id_of_token(token)
        if job_id is None:
            raise AuthenticationFailed("invalid job token")
        return JobPrincipal(job_id), token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="job"'


class JobTokenScheme(OpenApiAuthenticationExtension):
    target_class = "queues.jobs.apis.JobTokenAuthentication"
    name = "jobToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "The job's own token, given to its pods in GPUPORTAL_JOB_TOKEN. "
            "Valid for that job's checkpoint reports only.",
        }


class JobRateThrottle(PortalUserRateThrottle):
    """The user rate (``API_THROTTLE_USER``), counted per job for a job's own token (a job has no
    user id to count by), per client address otherwise."""

    def get_cache_key(self, request: Request, view: Any) -> str:
        principal = request.user
        if isinstance(principal, JobPrincipal):
            return self.cache_format % {"scope": "job", "ident": principal.job_id}
        return self.cache_format % {"scope": "anon", "ident": self.get_ident(request)}


class JobCheckpointView(APIView):
    """A running job reports a checkpoint it has just written, with its own token."""

    authentication_classes = [JobTokenAuthentication]
    throttle_classes = [JobRateThrottle]

    def permission_denied(
        self, request: Request, message: str | None = None, code: str | None = None
    ) -> NoReturn:
        if not request.successful_authenticator:
            raise NotAuthenticated(
                "send the job's own token: Authorization: Bearer $GPUPORTAL_JOB_TOKEN "
                "(personal tokens and sessions are not accepted here)"
            )
        super().permission_denied(request, message=message, code=code)

    @extend_schema(
        tags=["jobs"],
        summary="Report a checkpoint (the job itself, with its job token)",
        description=(
            "Preemption then counts lost work from now. Only the job token of this very job is "
            "accepted; a job token of another job gets 404, as if no other job existed."
        ),
        parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)],
        request=None,
        responses={
            200: CheckpointSerializer,
            404: _error("Not this token's job."),
            409: _error("The job is not running."),
        },
    )
    def post(self, request: Request, pk: str) -> Response:
        job_id = _job_id(pk)
        principal = request.user
        mine = isinstance(principal, JobPrincipal) and job_id == principal.job_id
        job = Job.objects.filter(pk=job_id).first() if mine and job_id is not None else None
        if job is None:
            raise NotFound()
        at = timezone.now()
        if not job_checkpoint(job=job, at=at):
            return Response(
                {"detail": f"job {job.pk} is {job.state}: only a running job reports checkpoints"},
                status=status.HTTP_409_CONFLICT,
            )
        return Response(CheckpointSerializer({"recorded": True, "at": at}).data)
