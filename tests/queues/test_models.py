"""Database constraints: what must never be stored, whatever path the write takes."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from queues.models import Queue
from tests.factories import (
    CapabilityClassFactory,
    GpuClassFactory,
    JobFactory,
    NodeFactory,
    QueueFactory,
    QuotaFactory,
    RateCardFactory,
    RateCardWeightFactory,
    ReservationFactory,
    TeamFactory,
)

pytestmark = pytest.mark.django_db


def refused(factory, constraint: str | tuple[str, ...], **fields) -> None:
    """The write is refused by the database with an error naming the expected constraint.

    SQLite names unique constraints by their columns, PostgreSQL by their names: a tuple gives
    the spellings accepted.
    """
    with pytest.raises(IntegrityError) as excinfo, transaction.atomic():
        factory(**fields)
    spellings = (constraint,) if isinstance(constraint, str) else constraint
    assert any(s in str(excinfo.value) for s in spellings), str(excinfo.value)


@pytest.mark.parametrize(
    ("factory", "fields", "constraint"),
    [
        (GpuClassFactory, {"name": "dup"}, "gpuclass"),
        (CapabilityClassFactory, {"name": "dup"}, "capabilityclass"),
        (TeamFactory, {"name": "dup"}, "team"),
        (QueueFactory, {"name": "dup"}, "queue"),
        (ReservationFactory, {"name": "dup"}, "reservation"),
        (NodeFactory, {"name": "dup"}, "node"),
    ],
)
def test_names_are_unique(factory, fields, constraint):
    factory(**fields)

    refused(factory, (f"queues_{constraint}.name", f"queues_{constraint}_name_key"), **fields)


def test_gpu_products_and_team_namespaces_are_unique():
    GpuClassFactory(product="NVIDIA-L4")
    TeamFactory(namespace="team-a")

    refused(
        GpuClassFactory,
        ("queues_gpuclass.product", "queues_gpuclass_product_key"),
        product="NVIDIA-L4",
    )
    refused(TeamFactory, ("queues_team.namespace", "queues_team_namespace_key"), namespace="team-a")


def test_one_quota_per_team_and_gpu_class():
    quota = QuotaFactory()

    refused(
        QuotaFactory,
        ("quota_one_per_team_class", "queues_quota.team_id, queues_quota.gpu_class_id"),
        team=quota.team,
        gpu_class=quota.gpu_class,
    )


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        ({"nominal": Decimal(-1)}, "quota_nominal_not_negative"),
        ({"borrowing_limit": Decimal("-0.5")}, "quota_borrowing_not_negative"),
    ],
)
def test_quotas_are_never_negative(fields, constraint):
    refused(QuotaFactory, constraint, **fields)


def test_gpu_class_counts_are_positive():
    refused(GpuClassFactory, "gpu_class_hbm_positive", hbm_gb=0)
    refused(GpuClassFactory, "gpu_class_tier_positive", tier=0)


def test_a_teams_fair_share_weight_is_positive():
    refused(TeamFactory, "team_fair_share_weight_positive", fair_share_weight=Decimal(0))


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        (
            {"default_runtime": timedelta(hours=5), "max_runtime": timedelta(hours=4)},
            "queue_default_runtime_within_max",
        ),
        ({"max_gpus_per_job": Decimal(0)}, "queue_max_gpus_per_job_positive"),
        (
            {"preemption_class": "preemptible", "checkpoint_interval": None},
            "queue_preemptible_needs_checkpoint_interval",
        ),
        (
            {
                "preemption_class": "graceful",
                "checkpoint_interval": timedelta(hours=1),
                "grace_period": None,
            },
            "queue_graceful_needs_grace_period",
        ),
        ({"preemption_class": "never", "may_borrow": True}, "queue_only_preemptible_work_borrows"),
        (
            {"min_job_priority": 0, "default_job_priority": 11, "max_job_priority": 10},
            "queue_job_priority_bounds_ordered",
        ),
    ],
)
def test_queue_terms_are_consistent(fields, constraint):
    refused(QueueFactory, constraint, **fields)


def test_a_consistent_preemptible_queue_is_stored():
    QueueFactory(
        preemption_class="graceful",
        grace_period=timedelta(minutes=10),
        checkpoint_interval=timedelta(hours=1),
        may_borrow=True,
    )

    assert Queue.objects.get().may_preempt


def test_a_reservation_ends_after_it_starts_or_is_standing():
    now = timezone.now()
    ReservationFactory(starts_at=None, ends_at=None)
    ReservationFactory(starts_at=now, ends_at=now + timedelta(hours=1))

    refused(
        ReservationFactory,
        "reservation_standing_or_end_after_start",
        starts_at=now,
        ends_at=now,
    )
    refused(
        ReservationFactory,
        "reservation_standing_or_end_after_start",
        starts_at=now,
        ends_at=None,
    )
    refused(ReservationFactory, "reservation_amount_positive", amount=Decimal(0))


def test_a_reservation_knows_when_it_is_in_force():
    now = timezone.now()
    window = ReservationFactory(starts_at=now, ends_at=now + timedelta(hours=1))
    standing = ReservationFactory()

    assert standing.is_in_force(now - timedelta(days=365))
    assert window.is_in_force(now)
    assert not window.is_in_force(now + timedelta(hours=1))


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        ({"pods": 0}, "job_pods_positive"),
        ({"gpus_per_pod": 0}, "job_gpus_per_pod_positive"),
        ({"cpu_millicores_per_pod": 0}, "job_cpu_positive"),
        ({"memory_mib_per_pod": 0}, "job_memory_positive"),
        ({"runtime_limit": timedelta(0)}, "job_runtime_positive"),
    ],
)
def test_job_counts_are_positive(fields, constraint):
    refused(JobFactory, constraint, **fields)


def test_node_counts_are_sane():
    refused(NodeFactory, "node_time_slice_replicas_positive", time_slice_replicas=0)
    refused(NodeFactory, "node_outside_use_not_negative", gpus_used_outside=Decimal(-1))


def test_rate_cards_have_one_weight_per_class_and_positive_values():
    weight = RateCardWeightFactory()

    refused(
        RateCardWeightFactory,
        (
            "rate_weight_one_per_card_class",
            "queues_ratecardweight.rate_card_id, queues_ratecardweight.gpu_class_id",
        ),
        rate_card=weight.rate_card,
        gpu_class=weight.gpu_class,
    )
    refused(RateCardWeightFactory, "rate_weight_positive", weight=Decimal(0))
    refused(
        RateCardFactory, "rate_card_price_not_negative", price_per_normalized_gpu_hour=Decimal(-1)
    )
    refused(RateCardFactory, "rate_card_currency_iso_code", currency="eur")


def test_the_rate_card_in_force_is_the_latest_that_has_started():
    now = timezone.now()
    old = RateCardFactory(effective_from=now - timedelta(days=30))
    current = RateCardFactory(effective_from=now - timedelta(days=1))
    RateCardFactory(effective_from=now + timedelta(days=1))

    from queues.models import RateCard

    assert RateCard.objects.in_force(now) == current
    assert RateCard.objects.in_force(now - timedelta(days=10)) == old
    assert RateCard.objects.in_force(now - timedelta(days=60)) is None
