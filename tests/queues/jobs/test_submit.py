"""job_submit keeps the queue's terms and names every field it refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queues.jobs.requests import JobRequest
from queues.jobs.services import JobRejected, job_submit
from queues.models import CapabilityClass, GpuClass, Job, JobState, Node, Queue, Team

pytestmark = pytest.mark.django_db


def submit(user, team="vision", queue="batch", capability="any-gpu", **fields):
    defaults = dict(image="registry.example/train:1", command=["python", "train.py"])
    defaults.update(fields)
    return job_submit(
        request=JobRequest(
            owner=user,
            team=Team.objects.get(name=team),
            queue=Queue.objects.get(name=queue),
            capability_class=CapabilityClass.objects.get(name=capability),
            **defaults,
        )
    )


def refused(user, **kwargs) -> dict[str, list[str]]:
    with pytest.raises(JobRejected) as excinfo:
        submit(user, **kwargs)
    assert Job.objects.count() == 0
    return excinfo.value.errors


def test_an_accepted_job_is_stored_pending_and_asks_for_a_reconcile(
    mia, django_capture_on_commit_callbacks, settings
):
    settings.RECONCILE_ON_COMMIT = True
    with django_capture_on_commit_callbacks() as callbacks:
        job = submit(mia, pods=2, gpus_per_pod=4, runtime_limit=timedelta(hours=6))

    assert job.state == JobState.PENDING
    assert (job.pods, job.gpus_per_pod, job.runtime_limit) == (2, 4, timedelta(hours=6))
    assert job.priority == 5  # batch's default
    assert job.checkpoint_interval == timedelta(minutes=30)  # batch requires one
    assert [e.kind for e in job.events.all()] == ["submitted"]
    assert len(callbacks) == 1


def test_the_queues_default_runtime_applies_when_none_is_given(mia):
    assert submit(mia).runtime_limit == timedelta(hours=12)


def test_a_runtime_over_the_queues_maximum(mia):
    assert refused(mia, runtime_limit=timedelta(days=4)) == {
        "runtime_limit": ["4d is over queue batch's maximum of 3d"]
    }


def test_more_gpus_than_the_per_job_maximum(mia):
    assert refused(mia, pods=3, gpus_per_pod=4) == {
        "gpus_per_pod": [
            "3 pod(s) × 4 = 12 GPU-equivalents is over queue batch's maximum of 8 per job"
        ]
    }


def test_a_capability_class_the_queue_does_not_allow(mia):
    assert refused(mia, queue="training", capability="any-gpu") == {
        "capability_class": [
            "queue training does not allow capability class any-gpu "
            "(allowed: bf16-large, fp8, multi-node-rdma)"
        ]
    }


def test_a_team_that_may_not_use_the_queue(mia):
    assert refused(mia, queue="inference", capability="inference-16gb") == {
        "queue": ["team vision may not submit to queue inference"]
    }


def test_a_team_the_user_is_not_in(mia):
    assert refused(mia, team="speech") == {"team": ["you are not a member of team speech"]}


def test_a_priority_outside_the_queues_bounds(mia):
    assert refused(mia, priority=11) == {"priority": ["must be from 0 to 10 in queue batch"]}


def test_a_time_sliced_job_must_declare_its_gpu_memory(mia):
    assert refused(mia, queue="interactive") == {
        "declared_gpu_memory_gb": [
            "time-sliced GPUs share their memory: declare how much your job uses"
        ]
    }


def test_a_mig_job_counts_its_slices_share(mia):
    job = submit(mia, queue="interactive-mig", capability="mig-1g.10gb")

    assert job.mig_profile == "1g.10gb"


def test_a_mig_capability_class_on_a_queue_that_does_not_hand_out_slices(mia):
    from queues.models import CapabilityClass as Cap

    Queue.objects.get(name="batch").allowed_capability_classes.add(
        Cap.objects.get(name="mig-1g.10gb")
    )

    assert refused(mia, capability="mig-1g.10gb") == {
        "capability_class": [
            "mig-1g.10gb asks for a MIG slice, but queue batch hands out exclusive GPUs"
        ]
    }


def test_an_image_outside_the_allowed_registries(mia, settings):
    settings.ALLOWED_IMAGE_REGISTRIES = ["registry.example", "nvcr.io"]

    assert refused(mia, image="pytorch/pytorch:2.4") == {
        "image": ["pytorch/pytorch:2.4 is not from an allowed registry (registry.example, nvcr.io)"]
    }
    assert refused(mia, image="evil.example:5000/x:1") == {
        "image": [
            "evil.example:5000/x:1 is not from an allowed registry (registry.example, nvcr.io)"
        ]
    }
    assert submit(mia, image="nvcr.io/nvidia/pytorch:24.05-py3").image.startswith("nvcr.io/")


def test_pods_bigger_than_any_node_of_the_queue_can_hold(mia):
    from tests.factories import NodeFactory

    h100 = GpuClass.objects.get(name="h100-80gb")
    t4 = GpuClass.objects.get(name="t4")
    NodeFactory(gpu_class=h100, cpu_millicores=190_000, memory_mib=1_945_600)
    NodeFactory(gpu_class=h100, cpu_millicores=96_000, memory_mib=1_048_576)
    NodeFactory(gpu_class=t4, cpu_millicores=250_000, memory_mib=4_000_000)  # not training's

    errors = refused(
        mia,
        queue="training",
        capability="bf16-large",
        cpu_millicores_per_pod=200_500,
        memory_mib_per_pod=2_000_000,
    )

    assert errors == {
        "cpu_millicores_per_pod": [
            "200.5 CPU cores per pod is more than any node of queue training can give a pod "
            "(the largest has 190 CPU cores allocatable)"
        ],
        "memory_mib_per_pod": [
            "2,000,000 MiB per pod is more than any node of queue training can give a pod "
            "(the largest has 1,945,600 MiB allocatable)"
        ],
    }
    # What the largest node allocates fits.
    submit(
        mia,
        queue="training",
        capability="bf16-large",
        cpu_millicores_per_pod=190_000,
        memory_mib_per_pod=1_945_600,
    )


def test_cpu_and_memory_must_fit_on_one_node(mia):
    from tests.factories import NodeFactory

    h100 = GpuClass.objects.get(name="h100-80gb")
    NodeFactory(gpu_class=h100, cpu_millicores=190_000, memory_mib=100_000)
    NodeFactory(gpu_class=h100, cpu_millicores=16_000, memory_mib=1_000_000)

    errors = refused(
        mia,
        queue="training",
        capability="bf16-large",
        cpu_millicores_per_pod=100_000,
        memory_mib_per_pod=500_000,
    )

    assert errors == {
        "cpu_millicores_per_pod": [
            "no node of queue training has both 100 CPU cores and 500,000 MiB allocatable "
            "for one pod: ask for less of one"
        ]
    }


def test_pod_size_is_not_checked_before_the_cluster_reported_its_nodes(mia):
    from tests.factories import NodeFactory

    NodeFactory(gpu_class=GpuClass.objects.get(name="h100-80gb"))  # allocatable unknown: 0

    job = submit(mia, queue="training", capability="bf16-large", cpu_millicores_per_pod=500_000)
    assert job.cpu_millicores_per_pod == 500_000


@pytest.mark.parametrize(
    ("limits", "shape", "field", "message"),
    [
        (
            {"max_gpus_per_user": 4},
            {"pods": 2, "gpus_per_pod": 4},
            "gpus_per_pod",
            "can never start: needs 8 GPUs; queue batch allows one user at most 4: ask for at "
            "most 4 GPUs, or use another queue",
        ),
        (
            {"max_running_jobs_per_user": 0},
            {"pods": 1, "gpus_per_pod": 1},
            "queue",
            "can never start: queue batch allows no running jobs per user: use another queue",
        ),
    ],
    ids=["over the per-user GPU cap", "no running job allowed per user"],
)
def test_submission_and_the_engine_read_one_per_user_rule(mia, limits, shape, field, message):
    """A job over the queue's per-user limits is refused at submit with the words the engine
    would give it as NeverFits, had it been stored (one rule: admission.never)."""
    from django.utils import timezone

    from queues import admission as engine
    from queues.reconcile.snapshot import snapshot_build
    from tests.factories import JobFactory

    Queue.objects.filter(name="batch").update(**limits)
    h100 = GpuClass.objects.get(name="h100-80gb")
    Node.objects.create(name="h100-1", gpu_class=h100, gpu_count=8, network_domain="ib-a")

    assert refused(mia, **shape) == {field: [message]}

    # The same job stored by another way (before the limit was set, say): the engine's verdict.
    stored = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        **shape,
    )
    status = engine.plan(snapshot_build(now=timezone.now())).status(stored.pk)
    assert status is not None
    assert (status.binding.code, f"{status.binding.message}: {status.binding.hint}") == (
        engine.ReasonCode.NEVER_FITS,
        message,
    )
