"""The headline read from the database as the reconcile and chargeback record it, against hand
computation; and /ops/ showing it on top, with each recommendation's link."""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from chargeback.ops.headline import headline_read
from queues.cluster.adapter import Cluster
from queues.cluster.prometheus import Prometheus
from queues.models import (
    CapabilityClass,
    CapacityHour,
    CapacitySample,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    PendingSample,
    Queue,
    QueueStats,
    Reservation,
    Team,
)
from queues.reconcile.cycle import reconcile_cycle
from queues.reconcile.history import hour_of
from tests.chargeback.helpers import hold
from tests.chargeback.ops.test_duty import run_jobs
from tests.chargeback.ops.test_duty import submit as submit_at
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
D = Decimal


def capacity_hours(gpu_class, first_hour, hours, *, in_use, free, reserved_idle):
    """``hours`` rolled-up hours of constant GPU-equivalents per state (stored as GPU-minutes)."""
    for n in range(hours):
        CapacityHour.objects.create(
            hour=first_hour + timedelta(hours=n),
            gpu_class=gpu_class,
            minutes=60,
            in_use=D(in_use * 60),
            free=D(free * 60),
            reserved_idle=D(reserved_idle * 60),
            unhealthy=D(0),
            maintenance=D(0),
            outside=D(0),
        )


@pytest.fixture
def week(example_policy):
    """An hour-aligned now; on l4 this week (from now − 168 h): 10 hours with 3 GPUs in use, 1
    free and 4 reserved-idle (30 of 80 allocatable GPU-h = 37.5 %, 40 reserved-idle GPU-h);
    last week 10 hours with 4 in use and 4 free (50.0 %). One minute of this week 2 jobs waited
    in batch on Fragmentation while 6 l4 were free (0.1 GPU-h stranded). Two jobs admitted onto
    l4 from inference (target 2 minutes): one after 1 minute, one after 10 (1 of 2 = 50.0 %).
    One l4 job preempted 30 minutes after its last checkpoint holding 2 GPUs (1 GPU-h). The
    reservation search-inference (4 l4, standing) used 40 GPU-h of its 672: 94 % idle."""
    now = hour_of(timezone.now())
    this_start = now - timedelta(days=7)
    l4 = GpuClass.objects.get(name="l4")
    capacity_hours(l4, this_start + timedelta(hours=2), 10, in_use=3, free=1, reserved_idle=4)
    capacity_hours(l4, this_start - timedelta(days=3), 10, in_use=4, free=4, reserved_idle=0)
    blocked = this_start + timedelta(hours=2, minutes=5)
    CapacitySample.objects.create(at=blocked, gpu_class=l4, in_use=D(2), free=D(6), slots={})
    batch, inference = Queue.objects.get(name="batch"), Queue.objects.get(name="inference")
    PendingSample.objects.create(at=blocked, queue=batch, code="Fragmentation", jobs=2)
    search = Team.objects.get(name="search")
    for waited in (1, 10):
        JobFactory(
            team=search,
            queue=inference,
            gpu_class=l4,
            state=JobState.SUCCEEDED,
            submitted_at=now - timedelta(days=1, minutes=waited),
            admitted_at=now - timedelta(days=1),
        )
    reserved = Reservation.objects.get(name="search-inference")
    Reservation.objects.exclude(pk=reserved.pk).update(active=False)
    on_reservation = JobFactory(
        team=search, queue=inference, gpu_class=l4, reservation=reserved, state=JobState.SUCCEEDED
    )
    hold(
        team=search,
        gpu_class="l4",
        devices=4,
        job=on_reservation,
        start=now - timedelta(days=2, hours=10),
        end=now - timedelta(days=2),
    )
    preempted = JobFactory(team=search, queue=batch, gpu_class=l4, state=JobState.PENDING)
    hold(
        team=search,
        gpu_class="l4",
        devices=2,
        job=preempted,
        start=now - timedelta(hours=5),
        end=now - timedelta(hours=4),
    )
    JobEvent.objects.create(
        job=preempted, at=now - timedelta(hours=4, minutes=30), kind="checkpoint"
    )
    JobEvent.objects.create(
        job=preempted,
        at=now - timedelta(hours=4),
        kind="preempted",
        details={"lost_work_seconds": 1800},
    )
    QueueStats.objects.create(
        queue=Queue.objects.get(name="training"),
        wait_p50=timedelta(hours=1),
        wait_p90=timedelta(hours=5, minutes=10),
        pending=3,
        computed_at=now,
    )
    return now


def test_the_headline_of_a_week_by_hand(week):
    headline = headline_read(now=week, prometheus=None)

    l4 = next(r for r in headline.rows if r.gpu_class == "l4")
    assert (l4.this.in_use, l4.this.allocatable) == (D("30.000"), D("80.000"))
    assert l4.this.allocated_percent == D("37.5")
    assert l4.last.allocated_percent == D("50.0")
    assert l4.this.busy_percent is None  # no Prometheus: said, not guessed
    assert headline.duty_error == "not configured: set PROMETHEUS_URL"
    assert l4.this.lost_parts == {
        "preemption": D("1.000"),
        "failures": D("0.000"),
        "idle allocations": D("0.000"),
        "reserved, idle": D("40.000"),
        "stranded": D("0.100"),
    }
    assert l4.this.lost == D("41.100") and l4.last.lost == D("0.000")
    assert (l4.this.admitted, l4.this.within_target, l4.this.slo_percent) == (2, 1, D("50.0"))
    # batch allows l4: 2 jobs over the one sampled minute
    assert l4.this.waiting == D("2.0")


def test_the_recommendations_of_that_week(week):
    texts = [r.text for r in headline_read(now=week, prometheus=None).recommendations]

    # jobs that waited for l4 this week: the two admitted onto it after 1 and 10 minutes
    assert texts == [
        "search-inference: 4 GPUs idle 94 % of the week while 2 jobs waited for l4 — lend it "
        "to preemptible work or shrink it",
        "queue training: p90 wait 5h10m against a target of 4h, 3 jobs waiting — add capacity "
        "or quota for it, or publish a target it can keep",
    ]


def test_no_recommendation_on_a_quiet_week(example_policy):
    headline = headline_read(now=timezone.now(), prometheus=None)
    # standing reservations idle all week, but nobody waited for their class
    assert headline.recommendations == []


def test_ops_opens_on_the_headline_and_folds_the_rest(week, ada):
    client = Client()
    client.force_login(ada)
    html = client.get("/ops/").content.decode()

    assert html.index('data-testid="headline"') < html.index(
        '<details class="section" id="capacity"'
    )
    card = html[html.index('data-testid="headline-l4"') :]
    assert '<strong data-testid="allocated">37.5 %</strong> <small>last week 50.0 %</small>' in card
    assert '<strong data-testid="lost">41.100</strong>' in card
    assert (
        '<a class="button" href="/manage/reservations/search-inference/">'
        "Edit reservation search-inference</a>"
    ) in html
    assert '<a class="button" href="/manage/policy/queues/training/">' in html


def test_the_drain_link_fills_the_maintenance_form_and_drains_nothing(example_policy, ada):
    client = Client()
    client.force_login(ada)
    html = client.get(
        "/manage/maintenance/?nodes=h100-07&reason=make+room+for+1+%C3%97+8+GPUs"
    ).content.decode()

    assert 'value="h100-07"' in html
    assert 'value="make room for 1 × 8 GPUs"' in html


def test_gpus_stranded_by_fragmentation_name_the_node_to_drain(sim_cluster, example_policy):
    # examples/cluster.yaml: h100-01..04 in service, 8 GPUs each. Four batch jobs of 6 GPUs
    # (one a node, each with a 1-hour limit) leave 2 free on each: 8 free, no 8-GPU slot. An
    # 8-GPU job then waits on Fragmentation; the first node to drain is the one whose job ends
    # first at its limit: h100-01's, started first.
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    batch = Queue.objects.get(name="batch")
    fp8 = CapabilityClass.objects.get(name="fp8")

    def submit(team, owner, gpus):
        return JobFactory(
            owner=get_user_model().objects.get(username=owner),
            team=Team.objects.get(name=team),
            queue=batch,
            capability_class=fp8,
            gpus_per_pod=gpus,
            runtime_limit=timedelta(hours=1),
            env={"SIM_DURATION_SECONDS": "3000"},
        )

    for team, owner in (
        ("nlp", "noah"),
        ("vision", "victor"),
        ("research", "rita"),
        ("nlp", "nina"),
    ):
        submit(team, owner, 6)
        for _ in range(2):
            reconcile_cycle(cluster=adapter, now=sim_cluster.now())
            sim_cluster.advance(30)
    waiting = submit("vision", "vera", 8)
    for _ in range(2):
        reconcile_cycle(cluster=adapter, now=sim_cluster.now())
        sim_cluster.advance(5)
    adapter.close()
    waiting.refresh_from_db()
    assert waiting.state == "pending"
    assert waiting.pending_reasons[0]["code"] == "Fragmentation"
    first = Job.objects.filter(state="running").order_by("started_at").first()
    assert first is not None
    now = sim_cluster.now()
    minutes = math.ceil((first.started_at + timedelta(hours=1) - now) / timedelta(minutes=1))

    recommendations = headline_read(now=now, prometheus=None).recommendations

    [advice] = [r for r in recommendations if r.kind == "fragmentation"]
    assert advice.text == (
        f"8 h100-80gb GPUs free, no 8-GPU slot (1 job waiting) — drain {first.nodes[0]} for "
        f"{minutes} min to make one"
    )
    assert advice.href.startswith(f"/manage/maintenance/?nodes={first.nodes[0]}&reason=")


def test_big_gpus_mostly_idle_from_the_duty_cycle(sim_cluster, example_policy, mia):
    # A vision pod on 2 GPUs for an hour at 12 %: 2 GPU-h, 0.24 busy → 12.0 % busy, and
    # 1.76 GPU-h of idle allocation lost.
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    job = submit_at(mia, utilization="12", seconds=3600, gpus=2)
    run_jobs(sim_cluster, adapter, [job], 3600)
    adapter.close()
    assert job.state == "succeeded"
    name = job.gpu_class.name

    headline = headline_read(
        now=sim_cluster.now(), prometheus=Prometheus(f"{sim_cluster.url}/prometheus")
    )

    row = next(r for r in headline.rows if r.gpu_class == name)
    assert row.this.busy_percent == D("12.0")
    assert row.this.lost_parts["idle allocations"] == D("1.760")
    assert headline.duty_error == ""
    [advice] = [r for r in headline.recommendations if r.kind == "low-duty"]
    assert advice.text == (
        f"team vision: {name} jobs 12 % busy over 2.000 GPU-hours this week — a MIG or "
        "time-sliced class would serve them"
    )
    assert advice.href == f"/manage/quotas/vision/{name}/"


def test_a_week_the_reconcile_never_recorded_has_no_waiting_figure(example_policy):
    # Jobs waited last week for all anyone knows: no minute was sampled, so the headline says
    # "—" rather than an average of 0.0 jobs.
    headline = headline_read(now=hour_of(timezone.now()), prometheus=None)

    assert {r.last.waiting for r in headline.rows} == {None}
    assert {r.this.waiting for r in headline.rows} == {None}
