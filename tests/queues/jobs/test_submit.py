"""job_submit keeps the queue's terms and names every field it refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queues.jobs.requests import JobRequest
from queues.jobs.services import JobRejected, job_submit
from queues.models import (
    CapabilityClass,
    GpuClass,
    Job,
    JobState,
    Node,
    Queue,
    Quota,
    Reservation,
    Team,
)

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


def _h100_nodes(gpus: int = 8, count: int = 1) -> None:
    h100 = GpuClass.objects.get(name="h100-80gb")
    for n in range(1, count + 1):
        Node.objects.create(name=f"h100-{n}", gpu_class=h100, gpu_count=gpus, network_domain="ib-a")


def _l4_node() -> None:
    Node.objects.create(name="l4-1", gpu_class=GpuClass.objects.get(name="l4"), gpu_count=8)


def _both_nodes() -> None:
    _h100_nodes()
    a100 = GpuClass.objects.get(name="a100-80gb")
    Node.objects.create(name="a100-1", gpu_class=a100, gpu_count=8, network_domain="ib-a")


NO_SHAPE = "ask for a shape the nodes can hold: fewer GPUs per pod, or less CPU or memory"

# (setup, request, the field submission refuses, the words both give; None: both take it)
VERDICTS = {
    "over the per-user GPU cap": (
        lambda: (Queue.objects.filter(name="batch").update(max_gpus_per_user=4), _h100_nodes()),
        {"pods": 2, "gpus_per_pod": 4},
        "gpus_per_pod",
        "can never start: needs 8 GPUs; queue batch allows one user at most 4: ask for at most "
        "4 GPUs, or use another queue",
    ),
    "no running job allowed per user": (
        lambda: (
            Queue.objects.filter(name="batch").update(max_running_jobs_per_user=0),
            _h100_nodes(),
        ),
        {"pods": 1, "gpus_per_pod": 1},
        "queue",
        "can never start: queue batch allows no running jobs per user: use another queue",
    ),
    "more than nominal plus borrowing on every class": (
        _both_nodes,
        {"queue": "training", "capability": "bf16-large", "pods": 4, "gpus_per_pod": 8},
        "gpus_per_pod",
        "can never start: a100-80gb: needs 32; team vision may hold at most 8 (nominal 4 + "
        "borrowing 4); h100-80gb: needs 32; team vision may hold at most 16 (nominal 8 + "
        "borrowing 8): ask for at most 16 GPU-equivalents (h100-80gb), or ask an admin for more "
        "quota",
    ),
    "more than nominal in a queue that may not borrow": (
        lambda: (
            Queue.objects.filter(name="batch").update(may_borrow=False),
            Quota.objects.filter(team__name="vision", gpu_class__name="h100-80gb").update(
                nominal=4
            ),
            _h100_nodes(),
        ),
        {"capability": "min-40gb", "pods": 1, "gpus_per_pod": 8},
        "gpus_per_pod",
        "can never start: h100-80gb: needs 8; team vision may hold at most 4 (nominal 4; queue "
        "batch may not borrow): ask for at most 4 GPU-equivalents (h100-80gb), or ask an admin "
        "for more quota",
    ),
    "more than the team's reservations in a reservation-only queue": (
        lambda: (Reservation.objects.filter(name="search-inference").update(amount=2), _l4_node()),
        {
            "user": "sara",
            "team": "search",
            "queue": "inference",
            "capability": "inference-16gb",
            "gpus_per_pod": 4,
        },
        "gpus_per_pod",
        "can never start: l4: needs 4; team search's reservations hold at most 2: ask for at "
        "most 2 GPU-equivalents (l4), or ask an admin for more quota",
    ),
    "a MIG slice on a class the team holds no quota of": (
        lambda: (
            Quota.objects.filter(team__name="vision", gpu_class__name="a100-80gb").update(
                nominal=0, borrowing_limit=0
            ),
            Node.objects.create(
                name="a100-mig",
                gpu_class=GpuClass.objects.get(name="a100-80gb"),
                gpu_count=1,
                mig_layout={"3g.40gb": 2},
            ),
        ),
        {
            "queue": "interactive-mig",
            "capability": "mig-3g.40gb",
            "runtime_limit": timedelta(hours=1),
        },
        "gpus_per_pod",
        "can never start: a100-80gb: needs 0.43; team vision may hold at most 0 (nominal 0; "
        "queue interactive-mig may not borrow): team vision holds no quota or reservation it may "
        "use here: ask an admin for quota, or use another queue",
    ),
    "a time-slice replica on a class the team holds no quota of": (
        lambda: (
            Quota.objects.filter(team__name="vision", gpu_class__name="t4").update(nominal=0),
            Node.objects.create(
                name="t4-shared",
                gpu_class=GpuClass.objects.get(name="t4"),
                gpu_count=2,
                time_slice_replicas=4,
            ),
        ),
        {"queue": "interactive", "declared_gpu_memory_gb": 4, "runtime_limit": timedelta(hours=1)},
        "gpus_per_pod",
        "can never start: t4: needs 0.25; team vision may hold at most 0 (nominal 0; queue "
        "interactive may not borrow): team vision holds no quota or reservation it may use "
        "here: ask an admin for quota, or use another queue",
    ),
    "a pod larger than any node": (
        lambda: _h100_nodes(gpus=4, count=2),
        {"capability": "fp8", "pods": 1, "gpus_per_pod": 8},
        "gpus_per_pod",
        "can never start: h100-80gb: 1 pod × 8 GPUs do not fit its 2 nodes even when they are "
        f"empty (at most 4 GPUs a node): {NO_SHAPE}",
    ),
    "a job that fits": (
        lambda: _h100_nodes(gpus=4, count=2),
        {"capability": "fp8", "pods": 2, "gpus_per_pod": 4},
        None,
        None,
    ),
}


@pytest.mark.parametrize(("setup", "shape", "field", "message"), VERDICTS.values(), ids=VERDICTS)
def test_submission_and_the_engine_give_one_verdict_in_the_same_words(
    mia, setup, shape, field, message
):
    """A request submission refuses as one that can never start is, stored by another way
    (before the policy changed, say), what the engine calls NeverFits, in the same words: the
    rules have one home (queues.admission: entitlement, never, pods). One it accepts, the
    engine never calls NeverFits."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from queues import admission as engine
    from queues.reconcile.snapshot import snapshot_build
    from tests.factories import JobFactory

    setup()
    shape = dict(shape)
    user = get_user_model().objects.get(username=shape.pop("user", "mia"))
    names = {k: shape.pop(k) for k in ("team", "queue", "capability") if k in shape}

    if message is None:
        submit(user, **names, **shape).delete()
    else:
        assert refused(user, **names, **shape) == {field: [message]}

    stored = JobFactory(
        owner=user,
        team=Team.objects.get(name=names.get("team", "vision")),
        queue=Queue.objects.get(name=names.get("queue", "batch")),
        capability_class=CapabilityClass.objects.get(name=names.get("capability", "any-gpu")),
        **shape,
    )
    status = engine.plan(snapshot_build(now=timezone.now())).status(stored.pk)
    if message is None:
        assert status is None or status.binding.code != engine.ReasonCode.NEVER_FITS
    else:
        assert status is not None
        assert (status.binding.code, f"{status.binding.message}: {status.binding.hint}") == (
            engine.ReasonCode.NEVER_FITS,
            message,
        )
