"""``manage.py demo_load``: keep the demo's queues busy for as long as the demo runs.

Every few seconds it tops each queue up to a few waiting jobs, submitted through the same
service as the form (``job_submit``), with runtime limits of minutes and pods that run most of
that (real time, like the rest of the demo). So the catalog shows real waits, reasons change,
and jobs start when their estimates say, however long the demo runs. For a demo database only.

Each job gets a GPU utilization profile (``PROFILES``, the simulated DCGM exporter's
``SIM_GPU_UTILIZATION``): some busy, some waiting on data before they compute, some mostly idle
(a notebook, an FP8 job that does not keep an H100 busy), so that the duty cycle and /ops/'s
recommendations show what a real cluster's would.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from queues.jobs.services import JobRejected, job_submit
from queues.management.commands.seed_demo import demo_request
from queues.models import Job, JobState

# (user, team, queue, capability class, pods, GPUs per pod, runtime limit in minutes, extra)
LOAD: list[tuple[str, str, str, str, int, int, int, dict[str, Any]]] = [
    ("noah", "nlp", "training", "bf16-large", 2, 8, 10, {}),
    ("victor", "vision", "training", "fp8", 1, 8, 8, {}),
    ("rita", "research", "training", "multi-node-rdma", 2, 8, 12, {}),
    ("nina", "nlp", "batch", "min-40gb", 1, 8, 8, {}),
    ("raj", "research", "batch", "bf16-large", 1, 4, 6, {}),
    ("vera", "vision", "batch", "any-gpu", 1, 2, 5, {}),
    ("sofia", "speech", "batch", "inference-16gb", 1, 4, 6, {}),
    ("vera", "vision", "interactive", "any-gpu", 1, 1, 6, {"declared_gpu_memory_gb": 8}),
    ("noah", "nlp", "interactive", "inference-16gb", 1, 1, 5, {"declared_gpu_memory_gb": 12}),
    ("victor", "vision", "interactive-mig", "mig-3g.40gb", 1, 1, 6, {}),
    ("raj", "research", "interactive-mig", "mig-1g.10gb", 1, 1, 5, {}),
]
# GPU utilization profiles per (queue, capability class): "<seconds since start>:<percent>,…"
# (simcluster.kubelet.utilization_profile); one is picked per job.
BUSY = ["0:92", "0:85,30:97"]
WAITS_ON_DATA = ["0:10,90:90", "0:25,60:80,180:15,240:85"]
MOSTLY_IDLE = ["0:8,40:15,120:10", "0:14"]
PROFILES: dict[tuple[str, str], list[str]] = {
    ("training", "bf16-large"): WAITS_ON_DATA,
    ("training", "fp8"): MOSTLY_IDLE,
    ("training", "multi-node-rdma"): BUSY,
    ("batch", "min-40gb"): BUSY + WAITS_ON_DATA,
    ("batch", "bf16-large"): WAITS_ON_DATA,
    ("batch", "any-gpu"): MOSTLY_IDLE + BUSY,
    ("batch", "inference-16gb"): ["0:35", "0:55"],
    ("interactive", "any-gpu"): ["0:30,60:3"],
    ("interactive", "inference-16gb"): ["0:20,90:2"],
    ("interactive-mig", "mig-3g.40gb"): ["0:45,120:5"],
    ("interactive-mig", "mig-1g.10gb"): ["0:60"],
}
# How many jobs each queue should have waiting; the generator tops up to this.
WAITING = {"training": 3, "batch": 3, "interactive": 1, "interactive-mig": 1}


def demo_load_step(*, rng: random.Random) -> list[Job]:
    """Submit, for each queue below its ``WAITING`` count, one job of ``LOAD``; return them.
    A template the portal refuses (a rule changed) is skipped."""
    waiting = {
        name: Job.objects.filter(queue__name=name, state=JobState.PENDING).count()
        for name in WAITING
    }
    users = get_user_model().objects
    submitted = []
    for name, want in WAITING.items():
        if waiting[name] >= want:
            continue
        user, team, queue, capability, pods, gpus, minutes, extra = rng.choice(
            [t for t in LOAD if t[2] == name]
        )
        request = demo_request(
            user=users.get(username=user),
            team=team,
            queue=queue,
            capability=capability,
            pods=pods,
            gpus=gpus,
            minutes=minutes,
            # pods run 50–95 % of the limit: the estimate (the limit) is an upper bound
            run_seconds=int(minutes * 60 * rng.uniform(0.5, 0.95)),
            extra=extra,
        )
        profile = rng.choice(PROFILES.get((queue, capability), BUSY))
        request = replace(request, env={**request.env, "SIM_GPU_UTILIZATION": profile})
        try:
            submitted.append(job_submit(request=request))
        except JobRejected:
            continue
    return submitted


class Command(BaseCommand):
    help = "Keep the demo's queues busy: top each up to a few waiting jobs, every few seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=20.0, help="seconds between rounds")
        parser.add_argument("--once", action="store_true", help="one round, then stop")
        parser.add_argument("--seed", type=int, default=None, help="random seed (repeatable)")

    def handle(self, *args: Any, interval: float, once: bool, seed: int | None, **options: Any):
        rng = random.Random(seed)
        while True:
            for job in demo_load_step(rng=rng):
                self.stdout.write(f"demo load: job {job.pk} to {job.queue.name}")
            if once:
                return
            time.sleep(interval)
