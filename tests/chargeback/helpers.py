"""Usage as the reconcile records it, for chargeback tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from fractions import Fraction

from queues.models import GpuClass, Job, SharingMode, Team, UsageInterval
from tests.factories import JobFactory

NOV = datetime(2026, 11, 1, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)
_uids = itertools.count()


def hold(
    *,
    team: str | Team,
    gpu_class: str,
    start: datetime,
    end: datetime | None,
    devices: int = 1,
    share: Fraction = Fraction(1),
    mode: str = SharingMode.EXCLUSIVE,
    job: Job | None = None,
    cost_center: str | None = None,
) -> UsageInterval:
    """One pod's hold on GPUs (``end`` None: still held)."""
    team = team if isinstance(team, Team) else Team.objects.get(name=team)
    klass = GpuClass.objects.get(name=gpu_class)
    job = job or JobFactory(team=team, gpu_class=klass)
    return UsageInterval.objects.create(
        job=job,
        team=team,
        cost_center=cost_center or team.cost_center,
        gpu_class=klass,
        node=f"{gpu_class}-01",
        pod_uid=f"uid-{next(_uids)}",
        pod_name=f"job-{job.pk}-0",
        devices=devices,
        share_numerator=share.numerator,
        share_denominator=share.denominator,
        sharing_mode=mode,
        started_at=start,
        ended_at=end,
    )
