from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from portal.roles import ADMIN, FINANCE_GROUP, role_set
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit
from queues.models import CapabilityClass, GpuClass, Job, Queue, Team
from queues.notifications.preferences import team_webhook_of, team_webhook_set
from queues.operations.services import quota_request_file

# Demo logins for a local demo database only; `make demo` prints them.
DEMO_PASSWORD = "demo-portal"
DEMO_MEMBER = "mia"


# The demo runs at real speed: every job's runtime limit is a few minutes and its pods run for
# part of it (the simulated cluster's SIM_DURATION_SECONDS), so waits, estimates, runtime limits
# and costs on the pages are all real time. (user, team, queue, capability class, pods, GPUs per
# pod, runtime limit in minutes, extra fields)
DEMO_JOBS: list[tuple[str, str, str, str, int, int, int, dict[str, Any]]] = [
    ("mia", "vision", "interactive", "any-gpu", 1, 1, 12, {"declared_gpu_memory_gb": 8}),
    ("mia", "nlp", "training", "bf16-large", 2, 8, 15, {}),
    ("mia", "vision", "interactive-mig", "mig-1g.10gb", 1, 1, 10, {}),
    ("noah", "nlp", "batch", "min-40gb", 1, 8, 12, {}),
    ("victor", "vision", "training", "fp8", 2, 8, 20, {}),
    ("rita", "research", "batch", "bf16-large", 1, 8, 25, {}),
    ("raj", "research", "batch", "bf16-large", 1, 8, 25, {}),
    ("sara", "search", "inference", "inference-16gb", 1, 4, 60, {}),
    ("sam", "speech", "batch", "inference-16gb", 1, 4, 8, {}),
]
# How busy each demo job keeps its GPUs (the simulated DCGM exporter's profile, by DEMO_JOBS
# index: percent, or "<seconds since start>:<percent>,…"): some idle-heavy, some waiting on data,
# so the duty cycle and the waste's idle hours show something real.
DEMO_UTILIZATION = {
    0: "0:35,120:5",  # a notebook left open
    1: "0:92",
    2: "0:15",
    3: "0:60,300:20",  # waiting on data after five minutes
    4: "0:88",
    5: "0:12",  # big GPUs, mostly idle
    6: "0:70",
    7: "0:45",
    8: "0:8",
}
# A team webhook to show on /manage/team-webhooks/: on the discard port, which nothing in the demo
# answers, and choosing no events, so nothing is sent to it. (Sent, each delivery would fail and be
# retried for about forty minutes, a warning in the worker's log at each attempt.)
DEMO_TEAM_WEBHOOK = ("vision", "http://127.0.0.1:9/demo/vision")
# Of its runtime limit, the share a demo job's pods run (it ends before the limit, as real jobs do).
RUN_SHARE = 0.8


def demo_request(
    *,
    user: Any,
    team: str,
    queue: str,
    capability: str,
    pods: int,
    gpus: int,
    minutes: int,
    run_seconds: int,
    extra: dict[str, Any],
    utilization: str = "",
) -> JobRequest:
    """A demo job: its runtime limit ``minutes``, its pods running ``run_seconds`` (real)."""
    return JobRequest(
        owner=user,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        command=["python", "train.py"],
        pods=pods,
        gpus_per_pod=gpus,
        runtime_limit=timedelta(minutes=minutes),
        # Simulation only: how long the simulated cluster runs the pods.
        env={
            "SIM_DURATION_SECONDS": str(run_seconds),
            **({"SIM_GPU_UTILIZATION": utilization} if utilization else {}),
        },
        name=f"{queue}-{capability}",
        **extra,
    )


class Command(BaseCommand):
    help = (
        "Give the demo users passwords and roles: a member in two teams, finance, an admin; "
        "with --jobs also submit demo jobs (once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", action="store_true", help="submit demo jobs if none exist")

    def handle(self, *args: Any, jobs: bool = False, **options: Any) -> None:
        user_model = get_user_model()
        member = user_model.objects.filter(username=DEMO_MEMBER).first()
        if member is None:
            raise CommandError(
                f"user {DEMO_MEMBER!r} does not exist: apply examples/policy.yaml first"
            )
        member.set_password(DEMO_PASSWORD)
        member.save(update_fields=["password"])

        finance, _ = user_model.objects.get_or_create(username="fiona")
        finance.set_password(DEMO_PASSWORD)
        finance.save(update_fields=["password"])
        finance.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])

        admin, _ = user_model.objects.get_or_create(username="ada")
        admin.set_password(DEMO_PASSWORD)
        admin.save(update_fields=["password"])
        role_set(admin, ADMIN, held=True)

        if jobs and not Job.objects.exists():
            # Three closed months first (chargeback's command: this app does not import it).
            call_command("seed_demo_history", stdout=self.stdout)
            self.seed_team_webhook()
            self.submit_demo_jobs()
        teams = ", ".join(Team.objects.filter(members=member).values_list("name", flat=True))
        self.stdout.write(
            f"Demo logins (password for all: {DEMO_PASSWORD}):\n"
            f"  member   {DEMO_MEMBER:<6} submits and watches jobs, sees queues and her teams' "
            f"usage (teams: {teams})\n"
            "  finance  fiona  chargeback statements, CSV export, closing a month\n"
            "  admin    ada    quotas, reservations, maintenance, quota requests "
            "(lands on /manage/; the Django admin at /admin/)"
        )

    def seed_team_webhook(self) -> None:
        team_name, url = DEMO_TEAM_WEBHOOK
        team = Team.objects.get(name=team_name)
        if not team_webhook_of(team).url:
            team_webhook_set(team=team, url=url, events=[], now=timezone.now())

    def submit_demo_jobs(self) -> None:
        users = get_user_model().objects
        for index, (username, team, queue, capability, pods, gpus, minutes, extra) in enumerate(
            DEMO_JOBS
        ):
            request = demo_request(
                user=users.get(username=username),
                team=team,
                queue=queue,
                capability=capability,
                pods=pods,
                gpus=gpus,
                minutes=minutes,
                run_seconds=int(minutes * 60 * RUN_SHARE),
                extra=extra,
                utilization=DEMO_UTILIZATION.get(index, ""),
            )
            job_submit(request=request)
        self.stdout.write(f"submitted {len(DEMO_JOBS)} demo jobs")
        # One quota request waiting for the admin (its evidence is what the portal knows now).
        quota_request_file(
            by=users.get(username=DEMO_MEMBER),
            team=Team.objects.get(name="vision"),
            gpu_class=GpuClass.objects.get(name="h100-80gb"),
            nominal=Decimal(12),
            borrowing_limit=Decimal(8),
            justification="The ViT-H sweep needs 12 H100s at once for a week.",
            now=timezone.now(),
        )
