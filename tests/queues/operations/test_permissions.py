"""Every admin page and action: staff only; finance may read the audit log; anonymous logs in."""

from __future__ import annotations

import pytest

from queues.models import QuotaRequest, Reservation

pytestmark = pytest.mark.django_db

STAFF_PAGES = [
    "/manage/",
    "/manage/quotas/",
    "/manage/quotas/vision/h100-80gb/",
    "/manage/maintenance/",
    "/manage/requests/",
    "/manage/reservations/",
    "/manage/reservations/new",
    "/manage/reservations/nlp-conference-run/",
    "/manage/policy/",
    "/manage/policy/export",
    "/manage/policy/queues/batch/",
    "/manage/policy/rate_cards/new",
]
STAFF_ACTIONS = [
    "/manage/policy/queues/batch/",
    "/manage/policy/gpu_classes/new",
    "/manage/reservations/new",
    "/manage/reservations/nlp-conference-run/end",
    "/manage/quotas/vision/h100-80gb/",
    "/manage/maintenance/",
    "/manage/maintenance/h100-01/return",
    "/manage/requests/{id}/approve",
    "/manage/requests/{id}/decline",
]


@pytest.fixture
def filed(mia, example_policy):
    from django.utils import timezone

    from queues.models import GpuClass, Team

    return QuotaRequest.objects.create(
        team=Team.objects.get(name="vision"),
        gpu_class=GpuClass.objects.get(name="h100-80gb"),
        requested_by=mia,
        nominal=10,
        borrowing_limit=8,
        justification="more",
        created_at=timezone.now(),
    )


@pytest.mark.parametrize("url", [*STAFF_PAGES, "/manage/audit/"])
def test_anonymous_is_sent_to_log_in(client, url, example_policy):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={url}"


@pytest.mark.parametrize("url", STAFF_PAGES)
@pytest.mark.parametrize("persona", ["mia", "fiona"])
def test_members_and_finance_get_403_on_admin_pages(client, url, persona, request):
    client.force_login(request.getfixturevalue(persona))
    assert client.get(url).status_code == 403


@pytest.mark.parametrize("url", STAFF_ACTIONS)
@pytest.mark.parametrize("persona", ["mia", "fiona"])
def test_members_and_finance_get_403_on_admin_actions(client, url, persona, request, filed):
    client.force_login(request.getfixturevalue(persona))
    response = client.post(url.format(id=filed.pk), {"nominal": "99", "reason": "x"})
    assert response.status_code == 403
    filed.refresh_from_db()
    assert filed.status == "pending"
    assert Reservation.objects.filter(name="nlp-conference-run", active=True).exists()


@pytest.mark.parametrize("url", STAFF_ACTIONS)
def test_anonymous_actions_are_sent_to_log_in(client, url, filed):
    response = client.post(url.format(id=filed.pk), {"nominal": "99"})
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("url", [*STAFF_PAGES, "/manage/audit/"])
def test_admins_open_every_page(client, url, ada, example_policy):
    client.force_login(ada)
    response = client.get(url, follow=True)
    assert response.status_code == 200


def test_finance_reads_the_audit_log_and_a_member_may_not(client, fiona, mia):
    client.force_login(fiona)
    assert client.get("/manage/audit/").status_code == 200
    client.force_login(mia)
    assert client.get("/manage/audit/").status_code == 403


def test_admins_land_on_the_admin_side(client, ada, mia):
    client.force_login(ada)
    assert client.get("/")["Location"] == "/manage/quotas/"
    client.force_login(mia)
    assert client.get("/")["Location"] == "/queues/"


def test_a_member_reads_only_their_teams_requests(client, filed, sara, mia):
    client.force_login(sara)
    assert client.get(f"/quota-requests/{filed.pk}/").status_code == 404
    client.force_login(mia)
    assert client.get(f"/quota-requests/{filed.pk}/").status_code == 200
