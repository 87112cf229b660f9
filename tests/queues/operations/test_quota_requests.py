"""Quota requests: a member files one with the portal's evidence, an admin approves (the quota
changes through the policy service, and the next reconcile admits what fits) or declines."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from auditlog.models import LogEntry
from django.utils import timezone

from queues.cluster.adapter import Cluster
from queues.models import (
    CapabilityClass,
    EventKind,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Queue,
    Quota,
    QuotaRequest,
    Team,
)
from queues.operations.selectors import quota_evidence
from queues.operations.services import quota_update
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def file_request(client, **data):
    """File through the page, as a member does (and read the page it leads to, as she would)."""
    response = client.post(
        "/quota-requests/new",
        {
            "team": "vision",
            "gpu_class": "h100-80gb",
            "nominal": "12",
            "borrowing_limit": "8",
            "justification": "The ViT sweep waits for days.",
            **data,
        },
    )
    if response.status_code == 302:
        client.get(response["Location"])
    return response


def test_the_evidence_counts_gpu_hours_held_back_by_quota_in_the_last_30_days(mia, example_policy):
    now = timezone.now()
    vision = Team.objects.get(name="vision")
    h100 = GpuClass.objects.get(name="h100-80gb")
    done = JobFactory(owner=mia, team=vision, state=JobState.SUCCEEDED, finished_at=now)
    JobEvent.objects.create(
        job=done,
        at=now - timedelta(hours=3),
        kind=EventKind.QUOTA_HELD,
        details={"gpu_class": "h100-80gb", "requested": 2},
    )
    JobEvent.objects.create(job=done, at=now - timedelta(hours=1), kind="admitted")
    waiting = JobFactory(owner=mia, team=vision, state=JobState.PENDING)
    Job.objects.filter(pk=waiting.pk).update(
        pending_reasons=[
            {"code": "QuotaExceeded", "message": "…", "details": {"gpu_class": "h100-80gb"}}
        ]
    )
    JobEvent.objects.create(
        job=waiting,
        at=now - timedelta(minutes=30),
        kind=EventKind.QUOTA_HELD,
        details={"gpu_class": "h100-80gb", "requested": 4},
    )
    old = JobFactory(owner=mia, team=vision, state=JobState.PENDING)
    JobEvent.objects.create(  # began 31 days ago: only its last 30 days count
        job=old,
        at=now - timedelta(days=31),
        kind=EventKind.QUOTA_HELD,
        details={"gpu_class": "h100-80gb", "requested": 1},
    )
    JobEvent.objects.create(job=old, at=now - timedelta(days=29), kind="cancelled")
    other_class = JobFactory(owner=mia, team=vision, state=JobState.PENDING)
    JobEvent.objects.create(
        job=other_class,
        at=now - timedelta(hours=5),
        kind=EventKind.QUOTA_HELD,
        details={"gpu_class": "a100-80gb", "requested": 8},
    )

    evidence = quota_evidence(team=vision, gpu_class=h100, now=now)

    # 2 GPUs × 2 h + 4 GPUs × 0.5 h + 1 GPU × 24 h
    assert evidence.waited_gpu_hours == Decimal("30.00")
    assert evidence.waiting_jobs == 3
    assert (evidence.nominal, evidence.borrowing_limit, evidence.in_use) == (
        Decimal("8.000"),
        Decimal("8.000"),
        Decimal("0.000"),
    )
    assert evidence.held_back == [waiting.pk]


def test_a_member_files_a_request_and_sees_it_with_its_evidence(client, mia):
    client.force_login(mia)

    response = file_request(client)

    request = QuotaRequest.objects.get()
    assert response["Location"] == f"/quota-requests/{request.pk}/"
    assert (
        request.team.name,
        request.gpu_class.name,
        request.nominal,
        request.borrowing_limit,
    ) == (
        "vision",
        "h100-80gb",
        Decimal("12.000"),
        Decimal("8.000"),
    )
    assert request.evidence == {
        "window_days": 30,
        "waited_gpu_hours": "0.00",
        "waiting_jobs": 0,
        "nominal": "8.000",
        "borrowing_limit": "8.000",
        "in_use": "0.000",
        "held_back": [],
    }
    page = client.get(response["Location"]).content.decode()
    assert "waiting for an admin" in page
    assert "0.00 GPU-hours" in page


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"team": "search"}, "team"),  # not her team
        ({"gpu_class": "h200"}, "gpu_class"),
        ({"nominal": "-2"}, "nominal"),
        ({"justification": ""}, "justification"),
        ({"nominal": "１２"}, "nominal"),  # fullwidth digits: Decimal() reads 12
        ({"justification": "needs 8 \u202e61 rof"}, "justification"),  # right-to-left override
        ({"justification": "zero\u200bwidth"}, "justification"),
    ],
)
def test_bad_requests_name_the_field_and_store_nothing(client, mia, data, field):
    client.force_login(mia)
    response = file_request(client, **data)
    assert response.status_code == 422
    assert list(response.context["form"].errors) == [field]
    assert QuotaRequest.objects.count() == 0


def test_a_justification_on_several_lines_is_fine(client, mia):
    client.force_login(mia)
    response = file_request(client, justification="A sweep of 40 runs.\r\n\tDue Friday.")
    assert response.status_code == 302
    assert QuotaRequest.objects.get().justification == "A sweep of 40 runs.\r\n\tDue Friday."


def test_an_admin_approves_and_the_quota_changes_audited(client, mia, ada, h100_nodes):
    client.force_login(mia)
    file_request(client)
    request = QuotaRequest.objects.get()
    client.force_login(ada)

    response = client.post(f"/manage/requests/{request.pk}/approve", follow=True)

    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("approved", ada)
    quota = Quota.objects.get(team__name="vision", gpu_class__name="h100-80gb")
    assert (quota.nominal, quota.borrowing_limit) == (Decimal("12.000"), Decimal("8.000"))
    assert [str(m) for m in response.context["messages"]] == [
        "Approved: vision now has 12 nominal + 8 borrowing of h100-80gb."
    ]
    (quota_entry,) = LogEntry.objects.get_for_object(quota).filter(additional_data__source="page")
    assert (quota_entry.actor, quota_entry.changes_dict) == (ada, {"nominal": ["8.000", "12.000"]})
    (decision,) = LogEntry.objects.get_for_object(request).filter(action=LogEntry.Action.UPDATE)
    assert decision.changes_dict["status"] == ["pending", "approved"]
    client.force_login(mia)
    assert "approved by ada" in client.get(f"/quota-requests/{request.pk}/").content.decode()
    # Decided once: a second approval is refused.
    client.force_login(ada)
    response = client.post(f"/manage/requests/{request.pk}/approve", follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        f"quota request {request.pk} was decided already"
    ]


def test_an_approval_that_would_over_commit_is_refused_with_the_numbers(
    client, mia, ada, h100_nodes
):
    client.force_login(mia)
    file_request(client, nominal="30")
    request = QuotaRequest.objects.get()
    client.force_login(ada)

    response = client.post(f"/manage/requests/{request.pk}/approve", follow=True)

    assert [str(m) for m in response.context["messages"]] == [
        "Not approved: gpu_classes[h100-80gb]: quotas (42) plus reservations (8 at "
        "2027-01-11T08:00:00Z) promise 50 GPUs, but the cluster has 40 on 5 healthy node(s); "
        "teams[vision].quotas.h100-80gb.nominal: at most 20 fits: the cluster's 40 less the "
        "other teams' nominal 12 and the reservations' 8"
    ]
    request.refresh_from_db()
    assert request.status == "pending"
    assert Quota.objects.get(team__name="vision", gpu_class__name="h100-80gb").nominal == 8


def test_a_decline_needs_a_reason_and_the_member_sees_it(client, mia, ada, example_policy):
    client.force_login(mia)
    file_request(client)
    request = QuotaRequest.objects.get()
    client.force_login(ada)

    client.post(f"/manage/requests/{request.pk}/decline", {"reason": ""})
    request.refresh_from_db()
    assert request.status == "pending"
    client.post(f"/manage/requests/{request.pk}/decline", {"reason": "Use the batch queue."})

    request.refresh_from_db()
    assert (request.status, request.decision_reason) == ("declined", "Use the batch queue.")
    client.force_login(mia)
    page = client.get(f"/quota-requests/{request.pk}/").content.decode()
    assert "declined by ada" in page and "Use the batch queue." in page


def test_after_approval_the_next_reconcile_admits_the_job_held_back(
    mia, ada, sim_cluster, example_policy
):
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    try:
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        quota_update(team="vision", gpu_class="t4", nominal=Decimal(0), borrowing_limit=Decimal(0))
        job = JobFactory(
            owner=mia,
            team=Team.objects.get(name="vision"),
            queue=Queue.objects.get(name="interactive"),
            capability_class=CapabilityClass.objects.get(name="any-gpu"),
            env={"SIM_DURATION_SECONDS": "600"},
        )
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        job.refresh_from_db()
        # no quota at all on the only class it may use: it can never start, for want of quota
        assert (job.state, job.pending_reasons[0]["code"]) == (JobState.PENDING, "NeverFits")
        assert [e.kind for e in job.events.all()] == [EventKind.QUOTA_HELD]
        request = QuotaRequest.objects.create(
            team=job.team,
            gpu_class=GpuClass.objects.get(name="t4"),
            requested_by=mia,
            nominal=1,
            borrowing_limit=0,
            justification="one replica",
            created_at=timezone.now(),
        )
        from queues.operations.services import quota_request_approve

        quota_request_approve(request=request, by=ada, now=timezone.now())
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())

        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
        assert [e.kind for e in job.events.all()] == [EventKind.QUOTA_HELD, "admitted"]
    finally:
        cluster.close()


def test_a_job_held_back_by_quota_links_to_a_prefilled_request(client, mia, example_policy):
    job = JobFactory(owner=mia, team=Team.objects.get(name="vision"), state=JobState.PENDING)
    Job.objects.filter(pk=job.pk).update(
        pending_reasons=[
            {
                "code": "QuotaExceeded",
                "message": "team vision: h100-80gb quota 8/8 in use (needs 1)",
                "details": {"team": "vision", "gpu_class": "h100-80gb"},
                "hint": "",
            }
        ]
    )
    client.force_login(mia)

    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert '<a href="/quota-requests/new?team=vision&amp;gpu_class=h100-80gb">' in page
    form = client.get("/quota-requests/new?team=vision&gpu_class=h100-80gb").context["form"]
    assert (form["team"].value(), form["gpu_class"].value()) == ("vision", "h100-80gb")


def test_a_request_for_more_than_the_class_has_is_refused_with_the_numbers(client, mia, h100_nodes):
    # 100,000 A100s were accepted; five H100 nodes of 8 have 40.
    client.force_login(mia)

    response = file_request(client, nominal="100000")

    assert response.status_code == 422
    assert response.context["form"].errors == {
        "nominal": [
            "the cluster has 40 h100-80gb GPUs in all (5 healthy nodes): ask for at most that"
        ]
    }
    assert QuotaRequest.objects.count() == 0


def test_an_admin_grants_less_than_asked_with_a_reason_the_member_reads(
    client, mia, ada, h100_nodes
):
    client.force_login(mia)
    file_request(client)  # 12 nominal + 8 borrowing
    request = QuotaRequest.objects.get()
    client.force_login(ada)

    # Less than asked needs a reason; nothing changes without one.
    response = client.post(
        f"/manage/requests/{request.pk}/approve",
        {"nominal": "10", "borrowing_limit": "8", "reason": ""},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == [
        "Not approved: reason: say why less than was asked is granted — the member sees it"
    ]
    # More than asked is not a grant.
    response = client.post(
        f"/manage/requests/{request.pk}/approve",
        {"nominal": "13", "borrowing_limit": "8", "reason": "generous"},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == [
        "Not approved: nominal: 13 is more than was asked (12): grant at most that, or edit "
        "the quota itself"
    ]
    response = client.post(
        f"/manage/requests/{request.pk}/approve",
        {"nominal": "１０", "borrowing_limit": "8", "reason": "x"},
        follow=True,
    )
    (message,) = [str(m) for m in response.context["messages"]]
    assert message.startswith("Not approved: nominal: ")
    request.refresh_from_db()
    assert request.status == "pending"
    assert Quota.objects.get(team__name="vision", gpu_class__name="h100-80gb").nominal == 8

    response = client.post(
        f"/manage/requests/{request.pk}/approve",
        {"nominal": "10", "borrowing_limit": "4", "reason": "Two H100s go to the Q1 reservation."},
        follow=True,
    )

    assert [str(m) for m in response.context["messages"]] == [
        "Approved (less than asked): vision now has 10 nominal + 4 borrowing of h100-80gb."
    ]
    request.refresh_from_db()
    assert (request.status, request.granted_nominal, request.granted_borrowing_limit) == (
        "approved",
        Decimal("10.000"),
        Decimal("4.000"),
    )
    quota = Quota.objects.get(team__name="vision", gpu_class__name="h100-80gb")
    assert (quota.nominal, quota.borrowing_limit) == (Decimal("10.000"), Decimal("4.000"))
    (decision,) = LogEntry.objects.get_for_object(request).filter(action=LogEntry.Action.UPDATE)
    assert decision.changes_dict["granted_nominal"] == ["None", "10.000"]
    client.force_login(mia)
    page = client.get(f"/quota-requests/{request.pk}/").content.decode()
    assert "approved in part by ada" in page
    assert "the quota is now 10 nominal + 4 borrowing (asked for 12 + 8)" in page
    assert "Two H100s go to the Q1 reservation." in page
    mine = client.get("/quota-requests/").content.decode()
    assert "<td>12 +8</td><td>10 +4</td>" in mine
