"""factory_boy factories for the domain models; defaults are valid and minimal."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from queues.models import (
    CapabilityClass,
    GpuClass,
    Job,
    Node,
    Queue,
    Quota,
    RateCard,
    RateCardWeight,
    Reservation,
    Team,
)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests")


class GpuClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuClass

    name = factory.Sequence(lambda n: f"gpu{n}")
    product = factory.Sequence(lambda n: f"NVIDIA-TEST-{n}")
    hbm_gb = 80
    precisions = ["fp16", "bf16"]
    tier = 1


class CapabilityClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CapabilityClass

    name = factory.Sequence(lambda n: f"cap{n}")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"team{n}")
    namespace = factory.Sequence(lambda n: f"ns-team{n}")
    cost_center = "CC-0001"


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    gpu_class = factory.SubFactory(GpuClassFactory)
    nominal = Decimal(4)
    borrowing_limit = Decimal(0)


class QueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Queue

    name = factory.Sequence(lambda n: f"queue{n}")
    expected_wait_target = timedelta(minutes=10)
    max_runtime = timedelta(hours=4)
    default_runtime = timedelta(hours=1)
    preemption_class = "never"
    sharing_mode = "exclusive"
    max_gpus_per_job = Decimal(8)


class ReservationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Reservation

    name = factory.Sequence(lambda n: f"reservation{n}")
    team = factory.SubFactory(TeamFactory)
    gpu_class = factory.SubFactory(GpuClassFactory)
    amount = Decimal(2)


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n}")
    gpu_class = factory.SubFactory(GpuClassFactory)
    gpu_count = 8


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    owner = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    queue = factory.SubFactory(QueueFactory)
    capability_class = factory.SubFactory(CapabilityClassFactory)
    image = "registry.example/train:1"
    command = ["python", "train.py"]
    runtime_limit = timedelta(hours=1)
    submitted_at = factory.LazyFunction(timezone.now)


class RateCardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RateCard

    effective_from = factory.Sequence(lambda n: timezone.now() - timedelta(days=n + 1))
    currency = "EUR"
    price_per_normalized_gpu_hour = Decimal("1.20")


class RateCardWeightFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RateCardWeight

    rate_card = factory.SubFactory(RateCardFactory)
    gpu_class = factory.SubFactory(GpuClassFactory)
    weight = Decimal(1)
