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
    with transaction.atomic():
        QueueStats.objects.exclude(queue_id__in=list(computed)).delete()
        for queue_id, values in computed.items():
            QueueStats.objects.update_or_create(
                queue_id=queue_id, defaults={**values, "computed_at": now}
            )
