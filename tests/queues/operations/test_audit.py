"""The audit log: each kind of policy change through each door, with who, from where, old → new;
bulk writes recorded; nobody edits or deletes an entry; a dry run names portal edits it reverts."""

from __future__ import annotations

import io
import re
from datetime import UTC
from pathlib import Path

import pytest
from auditlog.models import LogEntry
from django.core.management import call_command

from queues.models import Job, Quota, RateCardWeight, Team
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]


def entries_for(obj):
    return list(LogEntry.objects.get_for_object(obj).order_by("timestamp", "id"))


def vision_h100():
    return Quota.objects.get(team__name="vision", gpu_class__name="h100-80gb")


def test_a_quota_changed_on_a_page_is_recorded_with_who_where_and_old_new(client, ada, h100_nodes):
    client.force_login(ada)
    client.post("/manage/quotas/vision/h100-80gb/", {"nominal": "12", "borrowing_limit": "8"})

    entry = entries_for(vision_h100())[-1]
    assert (entry.actor, entry.additional_data, entry.action) == (
        ada,
        {"source": "page"},
        LogEntry.Action.UPDATE,
    )
    assert entry.changes_dict == {"nominal": ["8.000", "12.000"]}
    assert entry.remote_addr == "127.0.0.1"


def test_a_quota_changed_in_the_django_admin_is_recorded_as_admin(client, ada, h100_nodes):
    ada.is_superuser = True
    ada.save(update_fields=["is_superuser"])
    client.force_login(ada)
    q = vision_h100()
    response = client.post(
        f"/admin/queues/quota/{q.pk}/change/",
        {"team": q.team_id, "gpu_class": q.gpu_class_id, "nominal": "10", "borrowing_limit": "8"},
    )
    assert response.status_code == 302

    entry = entries_for(q)[-1]
    assert (entry.actor, entry.additional_data) == (ada, {"source": "admin"})
    assert entry.changes_dict == {"nominal": ["8.000", "10.000"]}


def test_the_django_admin_refuses_an_over_committing_quota_with_the_numbers(
    client, ada, h100_nodes
):
    ada.is_superuser = True
    ada.save(update_fields=["is_superuser"])
    client.force_login(ada)
    q = vision_h100()
    before = LogEntry.objects.count()
    response = client.post(
        f"/admin/queues/quota/{q.pk}/change/",
        {"team": q.team_id, "gpu_class": q.gpu_class_id, "nominal": "21", "borrowing_limit": "8"},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == [
        "Not saved, the policy would be refused: gpu_classes[h100-80gb]: quotas (33) plus "
        "reservations (8 at 2027-01-11T08:00:00Z) promise 41 GPUs, but the cluster has 40 on 5 "
        "healthy node(s)"
    ]
    assert vision_h100().nominal == 8
    assert LogEntry.objects.count() == before


def test_a_policy_file_is_recorded_as_file_and_its_bulk_writes_too(example_policy, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "teams:\n"
        "  - name: vision\n"
        "    namespace: team-vision\n"
        "    cost_center: CC-1001\n"
        "    members: [mia, victor, vera]\n"
        "    quotas:\n"
        "      h100-80gb: {nominal: 6, borrowing_limit: 8}\n"
        "rate_cards:\n"
        "  - effective_from: 2030-01-01T00:00:00Z\n"
        "    currency: EUR\n"
        "    price_per_normalized_gpu_hour: 2.5\n"
        "    weights: {h100-80gb: 4, a100-80gb: 2.5, l4: 1, t4: 0.5}\n"
    )
    call_command("apply_policy", str(policy), stdout=io.StringIO())

    import getpass
    import hashlib

    digest = hashlib.sha256(policy.read_bytes()).hexdigest()[:12]
    via = f"policy file policy.yaml (sha256 {digest}) applied by OS user {getpass.getuser()}"
    quota_entry = entries_for(vision_h100())[-1]
    # No portal user: the entry names the file, its content's digest and who ran the command.
    assert (quota_entry.actor, quota_entry.additional_data) == (
        None,
        {"source": "file", "via": via},
    )
    assert quota_entry.changes_dict == {"nominal": ["8.000", "6.000"]}
    # bulk_create fires no signals: the weights are recorded explicitly.
    weights = RateCardWeight.objects.filter(rate_card__effective_from__year=2030)
    assert weights.count() == 4
    for weight in weights:
        (entry,) = entries_for(weight)
        assert entry.action == LogEntry.Action.CREATE
        assert entry.additional_data == {"source": "file", "via": via}
        assert entry.changes_dict["weight"] == ["None", str(weight.weight)]


def test_a_dry_run_names_the_portal_edits_the_file_would_revert(client, ada, h100_nodes):
    client.force_login(ada)
    client.post("/manage/quotas/vision/h100-80gb/", {"nominal": "12", "borrowing_limit": "8"})
    out = io.StringIO()

    call_command("apply_policy", str(ROOT / "examples" / "policy.yaml"), "--dry-run", stdout=out)

    lines = out.getvalue().splitlines()
    (line,) = [line for line in lines if "quotas.h100-80gb.nominal" in line]
    assert line.startswith(
        "    quotas.h100-80gb.nominal: 12 → 8  (reverts a portal edit: ada via page, "
    )
    assert vision_h100().nominal == 12


def test_after_the_file_is_applied_the_edit_is_no_longer_a_portal_edit(client, ada, h100_nodes):
    client.force_login(ada)
    client.post("/manage/quotas/vision/h100-80gb/", {"nominal": "12", "borrowing_limit": "8"})
    call_command("apply_policy", str(ROOT / "examples" / "policy.yaml"), stdout=io.StringIO())
    client.post("/manage/quotas/vision/h100-80gb/", {"nominal": "8", "borrowing_limit": "6"})
    out = io.StringIO()

    call_command("apply_policy", str(ROOT / "examples" / "policy.yaml"), "--dry-run", stdout=out)

    assert (
        "quotas.h100-80gb.borrowing_limit: 6 → 8  (reverts a portal edit: ada via page"
        in out.getvalue()
    )
    assert "quotas.h100-80gb.nominal" not in out.getvalue()


def test_the_audit_log_page_filters_by_source_and_shows_old_and_new(client, ada, fiona, h100_nodes):
    client.force_login(ada)
    client.post("/manage/quotas/vision/h100-80gb/", {"nominal": "12", "borrowing_limit": "8"})
    client.force_login(fiona)

    response = client.get("/manage/audit/", {"source": "page"})

    rows = response.context["rows"]
    assert [(e.object_repr, changes) for e, changes in rows] == [
        ("vision · h100-80gb: 12.000 (+8.000)", [("nominal", "8.000", "12.000")])
    ]
    assert client.get("/manage/audit/", {"source": "nonsense", "page": "x"}).status_code == 200


def test_nobody_edits_or_deletes_audit_entries_or_mirror_rows(client, ada, mia, h100_nodes):
    ada.is_superuser = True
    ada.save(update_fields=["is_superuser"])
    client.force_login(ada)
    client.post("/manage/quotas/vision/h100-80gb/", {"nominal": "12", "borrowing_limit": "8"})
    entry = LogEntry.objects.latest("timestamp")
    job = JobFactory(owner=mia, team=Team.objects.get(name="vision"))

    assert (
        client.post(f"/admin/auditlog/logentry/{entry.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert client.get("/admin/queues/job/add/").status_code == 403
    assert client.post(f"/admin/queues/job/{job.pk}/delete/", {"post": "yes"}).status_code == 403
    response = client.post(f"/admin/queues/job/{job.pk}/change/", {"state": "succeeded"})
    assert response.status_code == 403
    for model in (
        "node",
        "usageinterval",
        "lease",
        "clusterstatus",
        "jobevent",
        "queueestimate",
        "queuestats",
    ):
        assert client.get(f"/admin/queues/{model}/add/").status_code == 403
    assert LogEntry.objects.filter(pk=entry.pk).exists()
    assert Job.objects.get(pk=job.pk).state == "pending"


def admin_reservation_form(r, **fields):
    return {
        "name": r.name,
        "team": r.team_id,
        "queue": r.queue_id or "",
        "gpu_class": r.gpu_class_id,
        "amount": "8",
        "starts_at_0": "2027-01-11",
        "starts_at_1": "08:00:00",
        "ends_at_0": "2027-01-13",
        "ends_at_1": "08:00:00",
        "active": "on",
        **fields,
    }


def test_a_reservation_changed_in_the_django_admin_is_validated_and_audited(
    client, ada, h100_nodes
):
    from queues.models import Reservation

    ada.is_superuser = True
    ada.save(update_fields=["is_superuser"])
    client.force_login(ada)
    r = Reservation.objects.get(name="nlp-conference-run")

    refused = client.post(
        f"/admin/queues/reservation/{r.pk}/change/",
        admin_reservation_form(r, amount="21"),
        follow=True,
    )
    assert [str(m) for m in refused.context["messages"]] == [
        "Not saved, the policy would be refused: gpu_classes[h100-80gb]: quotas (20) plus "
        "reservations (21 at 2027-01-11T08:00:00Z) promise 41 GPUs, but the cluster has 40 on 5 "
        "healthy node(s)"
    ]
    assert Reservation.objects.get(pk=r.pk).amount == 8

    saved = client.post(
        f"/admin/queues/reservation/{r.pk}/change/", admin_reservation_form(r, amount="12")
    )
    assert saved.status_code == 302
    entry = entries_for(r)[-1]
    assert (entry.actor, entry.additional_data, entry.changes_dict) == (
        ada,
        {"source": "admin"},
        {"amount": ["8.000", "12.000"]},
    )


def test_the_audit_page_names_related_objects_and_shows_times_to_the_second(
    client, ada, mia, h100_nodes
):
    # It showed "decided_by: ∅ → 13" and times with microseconds.
    from decimal import Decimal

    from django.utils import timezone

    from queues.models import GpuClass
    from queues.operations.services import quota_request_file

    request = quota_request_file(
        by=mia,
        team=Team.objects.get(name="vision"),
        gpu_class=GpuClass.objects.get(name="h100-80gb"),
        nominal=Decimal(9),
        borrowing_limit=Decimal(8),
        justification="a sweep",
        now=timezone.now(),
    )
    client.force_login(ada)
    declined = client.post(f"/manage/requests/{request.pk}/decline", {"reason": "not now"})
    assert declined.status_code == 302
    request.refresh_from_db()

    page = client.get("/manage/audit/", {"model": "quotarequest"}).content.decode()

    assert "<code>decided_by</code>: ∅ → ada</li>" in page
    decided = f"{request.decided_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    assert f"<code>decided_at</code>: ∅ → {decided}</li>" in page
    changes = " ".join(re.findall(r'<ul class="plain changes">(.*?)</ul>', page, re.S))
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d{6}", changes)
