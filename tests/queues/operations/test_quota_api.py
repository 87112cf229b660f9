"""The admin side's quota API: staff only, the policy service's checks, audited as the API."""

from __future__ import annotations

from decimal import Decimal

import pytest
from auditlog.models import LogEntry

from queues.models import Quota

pytestmark = pytest.mark.django_db


def test_members_and_finance_get_403_and_anonymous_401(api, api_as, mia, fiona, example_policy):
    assert api.get("/api/quotas/").status_code == 401
    assert api_as(mia).get("/api/quotas/").status_code == 403
    assert api_as(fiona).get("/api/quotas/").status_code == 403
    body = {"nominal": "1", "borrowing_limit": "0"}
    assert api_as(mia).put("/api/quotas/vision/t4/", body, format="json").status_code == 403


def test_an_admin_reads_the_grid_and_raises_a_quota_audited_as_the_api(api_as, ada, example_policy):
    grid = api_as(ada).get("/api/quotas/").json()
    t4 = next(r for r in grid if (r["team"], r["gpu_class"]) == ("vision", "t4"))
    before = Quota.objects.get(team__name="vision", gpu_class__name="t4")
    assert t4["nominal"] == str(before.nominal)

    response = api_as(ada).put(
        "/api/quotas/vision/t4/", {"nominal": "3", "borrowing_limit": "1"}, format="json"
    )

    assert response.status_code == 200
    assert (response.json()["nominal"], response.json()["borrowing_limit"]) == ("3.000", "1.000")
    quota = Quota.objects.get(team__name="vision", gpu_class__name="t4")
    assert (quota.nominal, quota.borrowing_limit) == (Decimal("3.000"), Decimal("1.000"))
    entry = LogEntry.objects.get_for_object(quota).order_by("-timestamp").first()
    assert entry is not None
    assert entry.actor == ada
    assert entry.additional_data["source"] == "api"
    assert entry.remote_addr == "127.0.0.1"  # the caller's address, as for page edits
    assert entry.changes_dict["nominal"] == [str(before.nominal), "3.000"]


def test_a_quota_over_the_class_capacity_is_refused_with_the_numbers(api_as, ada, h100_nodes):
    # 40 H100s; other teams hold 8 + 4, the conference reservation 8: vision may have 20 at most.
    response = api_as(ada).put(
        "/api/quotas/vision/h100-80gb/", {"nominal": "21", "borrowing_limit": "8"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "non_field_errors": [
            "gpu_classes[h100-80gb]: quotas (33) plus reservations (8 at 2027-01-11T08:00:00Z) "
            "promise 41 GPUs, but the cluster has 40 on 5 healthy node(s)",
            "teams[vision].quotas.h100-80gb.nominal: at most 20 fits: the cluster's 40 less the "
            "other teams' nominal 12 and the reservations' 8",
        ]
    }
    quota = Quota.objects.get(team__name="vision", gpu_class__name="h100-80gb")
    assert (quota.nominal, quota.borrowing_limit) == (Decimal("8.000"), Decimal("8.000"))


def test_a_bad_body_names_the_field_and_an_unknown_quota_is_404(api_as, ada, example_policy):
    bad = api_as(ada).put("/api/quotas/vision/t4/", {"nominal": "-1"}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()) == {"nominal", "borrowing_limit"}
    missing = api_as(ada).put(
        "/api/quotas/nope/t4/", {"nominal": "1", "borrowing_limit": "0"}, format="json"
    )
    assert missing.status_code == 404


def test_every_refusal_matches_the_schemas_400(api_as, ada, h100_nodes):
    # The schema said `detail` was a list, while field errors came without it and an unreadable
    # body had `detail` as a string.
    import jsonschema
    from drf_spectacular.generators import SchemaGenerator

    document = SchemaGenerator().get_schema(request=None, public=True)
    operation = document["paths"]["/api/quotas/{team}/{gpu_class}/"]["put"]
    declared = operation["responses"]["400"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator({**declared, "components": document["components"]})
    api = api_as(ada)
    url = "/api/quotas/vision/h100-80gb/"

    refusals = [
        api.put(url, {"nominal": "21", "borrowing_limit": "8"}, format="json"),  # over capacity
        api.put(url, {"nominal": "-1"}, format="json"),  # fields
        api.put(url, "{not json", content_type="application/json"),  # unreadable
    ]

    assert [r.status_code for r in refusals] == [400, 400, 400]
    for refusal in refusals:
        validator.validate(refusal.json())
    assert list(refusals[0].json()) == ["non_field_errors"]
    assert sorted(refusals[1].json()) == ["borrowing_limit", "nominal"]
    assert list(refusals[2].json()) == ["detail"]


def test_an_amount_in_other_digits_is_refused_naming_the_field(api_as, ada, example_policy):
    response = api_as(ada).put(
        "/api/quotas/vision/t4/", {"nominal": "３", "borrowing_limit": "0"}, format="json"
    )

    assert (response.status_code, response.json()) == (
        400,
        {"nominal": ["write the number in ASCII digits (0-9)"]},
    )
