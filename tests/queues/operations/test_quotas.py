"""Quotas from the grid: the policy service's validation, with the numbers; the grid's numbers."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from queues.models import GpuClass, Job, JobState, Quota, Team
from queues.operations.selectors import quota_grid
from queues.operations.services import quota_update
from queues.policy.parse import PolicyError
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def quota(team: str, gpu_class: str) -> tuple[Decimal, Decimal]:
    q = Quota.objects.get(team__name=team, gpu_class__name=gpu_class)
    return q.nominal, q.borrowing_limit


def test_an_admin_raises_a_quota_in_the_grid(client, ada, h100_nodes):
    client.force_login(ada)
    response = client.post(
        "/manage/quotas/vision/h100-80gb/", {"nominal": "12", "borrowing_limit": "4.5"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/manage/quotas/"
    assert quota("vision", "h100-80gb") == (Decimal("12.000"), Decimal("4.500"))


def test_it_refuses_a_quota_over_the_class_capacity_with_the_numbers(client, ada, h100_nodes):
    client.force_login(ada)
    # 40 H100s; other teams hold 8 + 4, the conference reservation 8: vision may have 20 at most.
    response = client.post(
        "/manage/quotas/vision/h100-80gb/", {"nominal": "21", "borrowing_limit": "8"}
    )
    assert response.status_code == 422
    assert response.context["problems"] == [
        "gpu_classes[h100-80gb]: quotas (33) plus reservations (8 at 2027-01-11T08:00:00Z) "
        "promise 41 GPUs, but the cluster has 40 on 5 healthy node(s)",
        # and the largest value that would be accepted, with where it comes from
        "teams[vision].quotas.h100-80gb.nominal: at most 20 fits: the cluster's 40 less the "
        "other teams' nominal 12 and the reservations' 8",
    ]
    assert (
        "promise 41 GPUs, but the cluster has 40 on 5 healthy node(s)" in response.content.decode()
    )
    assert quota("vision", "h100-80gb") == (Decimal("8.000"), Decimal("8.000"))


def test_the_largest_quota_that_fits_is_accepted(h100_nodes):
    quota_update(
        team="vision", gpu_class="h100-80gb", nominal=Decimal(20), borrowing_limit=Decimal(0)
    )
    assert quota("vision", "h100-80gb") == (Decimal("20.000"), Decimal("0.000"))


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"nominal": "-1", "borrowing_limit": "0"}, "nominal", "greater than or equal to 0"),
        ({"nominal": "abc", "borrowing_limit": "0"}, "nominal", "Enter a number."),
        ({"nominal": "1", "borrowing_limit": ""}, "borrowing_limit", "This field is required."),
        ({"nominal": "1.0001", "borrowing_limit": "0"}, "nominal", "more than 3 decimal places"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
    client, ada, h100_nodes, data, field, message
):
    client.force_login(ada)
    response = client.post("/manage/quotas/vision/h100-80gb/", data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == [field]
    assert message in errors[field][0]
    assert quota("vision", "h100-80gb") == (Decimal("8.000"), Decimal("8.000"))


def test_unknown_team_or_class_is_404(client, ada, example_policy):
    client.force_login(ada)
    assert client.get("/manage/quotas/nobody/h100-80gb/").status_code == 404
    assert client.post("/manage/quotas/vision/nothing/", {"nominal": "1"}).status_code == 404


def test_the_service_refuses_unknown_names():
    with pytest.raises(PolicyError) as refused:
        quota_update(team="ghost", gpu_class="h100-80gb", nominal=Decimal(1), borrowing_limit=0)
    assert str(refused.value) == "teams[ghost]: no such active team"


def test_the_grid_shows_use_and_jobs_held_back(mia, h100_nodes):
    vision = Team.objects.get(name="vision")
    h100 = GpuClass.objects.get(name="h100-80gb")
    JobFactory(
        owner=mia,
        team=vision,
        state=JobState.RUNNING,
        gpu_class=h100,
        pods=2,
        gpus_per_pod=3,
        capacity_kind="nominal",
        nodes=["h100-01", "h100-02"],
    )
    held = JobFactory(owner=mia, team=vision, state=JobState.PENDING)
    Job.objects.filter(pk=held.pk).update(
        pending_reasons=[
            {"code": "QuotaExceeded", "message": "…", "details": {"gpu_class": "h100-80gb"}},
            {"code": "InsufficientCapacity", "message": "…", "details": {}},
        ]
    )
    not_binding = JobFactory(owner=mia, team=vision, state=JobState.PENDING)
    Job.objects.filter(pk=not_binding.pk).update(
        pending_reasons=[
            {"code": "Priority", "message": "…", "details": {}},
            {"code": "QuotaExceeded", "message": "…", "details": {"gpu_class": "h100-80gb"}},
        ]
    )

    grid = quota_grid()

    row = next(r for r in grid.rows if r.team.name == "vision")
    cell = next(c for c in row.cells if c.gpu_class.name == "h100-80gb")
    assert (cell.nominal, cell.borrowing_limit, cell.in_use, cell.held_back) == (
        Decimal("8.000"),
        Decimal("8.000"),
        Decimal("6.000"),
        1,
    )
    assert grid.totals["h100-80gb"] == Decimal("20.000")
    assert timezone.now()  # the grid reads stored rows only


def test_a_mig_cut_node_counts_its_slices_not_its_gpus_against_quotas(example_policy):
    # Two whole A100 nodes and one cut into 28 × 1g.10gb and 8 × 3g.40gb (28/7 + 24/7): 23.429
    # GPU-equivalents. Counted as 8 GPUs, quotas of 24 were accepted.
    from decimal import Decimal

    from queues.models import GpuClass, Node
    from queues.operations.services import quota_update
    from queues.policy.parse import PolicyError

    a100 = GpuClass.objects.get(name="a100-80gb")
    for name in ("a100-01", "a100-02"):
        Node.objects.create(name=name, gpu_class=a100, product=a100.product, gpu_count=8)
    Node.objects.create(
        name="a100-03",
        gpu_class=a100,
        product=a100.product,
        gpu_count=8,
        mig_layout={"1g.10gb": 28, "3g.40gb": 8},
    )

    # The other teams hold 10: vision may have 13 (23 in all), not 14 (24).
    quota_update(
        team="vision", gpu_class="a100-80gb", nominal=Decimal(13), borrowing_limit=Decimal(4)
    )
    with pytest.raises(PolicyError) as refused:
        quota_update(
            team="vision", gpu_class="a100-80gb", nominal=Decimal(14), borrowing_limit=Decimal(4)
        )

    assert [str(p) for p in refused.value.problems] == [
        "gpu_classes[a100-80gb]: quotas (24) plus reservations (0) promise 24 GPUs, but the "
        "cluster has 23.429 on 3 healthy node(s)",
        "teams[vision].quotas.a100-80gb.nominal: at most 13.429 fits: the cluster's 23.429 "
        "less the other teams' nominal 10 and the reservations' 0",
    ]


def test_the_quota_edit_page_shows_use_jobs_held_back_and_the_most_that_fits(
    client, ada, mia, h100_nodes
):
    from queues.models import CapabilityClass, JobState, Queue, Team
    from tests.factories import JobFactory

    held = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="training"),
        capability_class=CapabilityClass.objects.get(name="bf16-large"),
        state=JobState.PENDING,
        pending_reasons=[
            {
                "code": "QuotaExceeded",
                "message": "",
                "details": {"gpu_class": "h100-80gb"},
                "hint": "",
            }
        ],
    )
    client.force_login(ada)

    html = client.get("/manage/quotas/vision/h100-80gb/").content.decode()

    facts = html.split('data-testid="quota-facts"', 1)[1].split("</dl>", 1)[0]
    assert "<dt>In use now</dt><dd>0 GPU-equivalents on this quota" in facts
    assert f'1 pending job (<a href="/jobs/{held.pk}/">{held.pk}</a>)' in facts
    assert (
        "<dt>Largest nominal that fits</dt><dd>20 (the cluster's 40 less the other teams' "
        "nominal 12 and the reservations' 8)" in facts
    )
