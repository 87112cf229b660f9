"""Writes of the catalog's stored numbers."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from queues.catalog.selectors import queue_stats_compute
from queues.models import (
    QueueStats,
)


def queue_stats_refresh(*, now: datetime) -> None:
    """Store every queue's live numbers (free GPUs, past waits, counts) for the catalog."""
    computed = queue_stats_compute(now=now)
    if not computed:
        QueueStats.objects.all().delete()
        return
    with transaction.atomic():
        QueueStats.objects.exclude(queue_id__in=list(computed)).delete()
        # one statement for every queue (a cycle runs several times a second under churn)
        QueueStats.objects.bulk_create(
            [
                QueueStats(queue_id=queue_id, **values, computed_at=now)
                for queue_id, values in computed.items()
            ],
            update_conflicts=True,
            unique_fields=["queue"],
            update_fields=[*sorted({name for v in computed.values() for name in v}), "computed_at"],
        )
