from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from portal.roles import FINANCE_GROUP
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit
from queues.models import CapabilityClass, GpuClass, Job, Queue, Team
from queues.operations.services import quota_request_file

# Demo logins for a local demo database only; `make demo` prints them.
DEMO_PASSWORD = "demo-portal"
DEMO_MEMBER = "mia"


# (user, team, queue, capability class, pods, GPUs per pod, simulated minutes, extra fields)
DEMO_JOBS: list[tuple[str, str, str, str, int, int, int, dict[str, Any]]] = [
    ("mia", "vision", "interactive", "any-gpu", 1, 1, 45, {"declared_gpu_memory_gb": 8}),
    ("mia", "nlp", "training", "bf16-large", 2, 8, 180, {}),
    ("mia", "vision", "interactive-mig", "mig-1g.10gb", 1, 1, 60, {}),
    ("noah", "nlp", "batch", "min-40gb", 1, 8, 120, {}),
    ("victor", "vision", "training", "fp8", 2, 8, 240, {}),
    ("rita", "research", "batch", "bf16-large", 1, 8, 300, {}),
    ("raj", "research", "batch", "bf16-large", 1, 8, 300, {}),
    ("sara", "search", "inference", "inference-16gb", 1, 4, 600, {}),
    ("sam", "speech", "batch", "inference-16gb", 1, 4, 90, {}),
]


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
        admin.is_staff = admin.is_superuser = True
        admin.set_password(DEMO_PASSWORD)
        admin.save(update_fields=["password", "is_staff", "is_superuser"])

        if jobs and not Job.objects.exists():
            self.submit_demo_jobs()
        teams = ", ".join(Team.objects.filter(members=member).values_list("name", flat=True))
        self.stdout.write(
            f"Demo logins (password for all: {DEMO_PASSWORD}):\n"
            f"  member   {DEMO_MEMBER:<6} (teams: {teams})\n"
            "  finance  fiona\n"
            "  admin    ada    (lands on /manage/; the Django admin at /admin/)"
        )

    def submit_demo_jobs(self) -> None:
        users = get_user_model().objects
        for username, team, queue, capability, pods, gpus, minutes, extra in DEMO_JOBS:
            request = JobRequest(
                owner=users.get(username=username),
                team=Team.objects.get(name=team),
                queue=Queue.objects.get(name=queue),
                capability_class=CapabilityClass.objects.get(name=capability),
                image="nvcr.io/nvidia/pytorch:24.05-py3",
                command=["python", "train.py"],
                pods=pods,
                gpus_per_pod=gpus,
                # Simulation only: how long the simulated cluster runs the pods.
                env={"SIM_DURATION_SECONDS": str(minutes * 60)},
                name=f"{queue}-{capability}",
                **extra,
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
