"""/ops/ end to end: who may open it, and the numbers it shows against hand-computed ones after
the reconcile has run against the simulated cluster."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from queues.cluster.adapter import Cluster
from queues.models import CapabilityClass, JobEvent, JobState, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from tests.chargeback.helpers import hold
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


def row(html, row_id):
    """The text of the table cells of the row with ``row_id``."""
    match = re.search(rf'<tr id="{row_id}">(.*?)</tr>', html, re.S)
    assert match, f"no row {row_id}"
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", match[1], re.S)
    ]


def test_admins_and_finance_may_open_it_members_may_not(example_policy, ada, fiona, mia):
    assert client_for(ada).get("/ops/").status_code == 200
    assert client_for(fiona).get("/ops/").status_code == 200
    assert client_for(mia).get("/ops/").status_code == 403
    assert client_for(fiona).get("/ops/last-day").status_code == 200
    assert client_for(mia).get("/ops/last-day").status_code == 403
    anonymous = Client().get("/ops/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


def test_the_nav_links_it_for_staff_and_finance_only(example_policy, ada, fiona, mia):
    assert 'href="/ops/"' in client_for(ada).get("/queues/").content.decode()
    assert 'href="/ops/"' in client_for(fiona).get("/queues/").content.decode()
    assert 'href="/ops/"' not in client_for(mia).get("/queues/").content.decode()


def test_waste_of_a_preempted_job(example_policy, ada):
    # Preempted an hour ago, 45 minutes after its last checkpoint, holding 4 GPUs until then:
    # 0.75 h × 4 = 3 GPU-hours lost.
    now = timezone.now()
    nlp = Team.objects.get(name="nlp")
    job = JobFactory(team=nlp, state=JobState.PENDING)
    hold(
        team=nlp,
        gpu_class="h100-80gb",
        devices=4,
        job=job,
        start=now - timedelta(hours=3),
        end=now - timedelta(hours=1),
    )
    JobEvent.objects.create(job=job, at=now - timedelta(minutes=105), kind="checkpoint")
    JobEvent.objects.create(job=job, at=now - timedelta(hours=1), kind="preempted")

    page = client_for(ada).get("/ops/").content.decode()
    html = client_for(ada).get("/ops/last-day").content.decode()

    assert 'hx-get="/ops/last-day"' in page  # the page loads its last 24 hours after itself
    waste = html[html.index('data-testid="waste"') :]
    assert (
        f'<td>nlp</td><td>{job.queue.name}</td><td>h100-80gb</td><td class="num">3.000</td>'
        '<td class="num">0.000</td><td class="num">0.000</td>' in waste
    )


def test_the_page_shows_what_the_reconcile_saw(sim_cluster, example_policy, ada, mia):
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        gpus_per_pod=8,
        env={"SIM_DURATION_SECONDS": "3600"},
    )
    for _ in range(3):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(10)
    cluster.close()

    html = client_for(ada).get("/ops/").content.decode()

    # The example cluster: h100 5 × 8 with h100-05 cordoned; a100 2 × 8 whole (one held now)
    # + a MIG node of 52/7 GPU-equivalents in slices; l4 5 × 4 with l4-04 unhealthy and 6
    # reserved (idle); t4 4 × 4 time-sliced.
    assert row(html, "capacity-h100-80gb") == ["h100-80gb", "0", "32", "0", "0", "8", "0"]
    assert row(html, "capacity-a100-80gb") == ["a100-80gb", "8", "15.429", "0", "0", "0", "0"]
    assert row(html, "capacity-l4") == ["l4", "0", "10", "6", "4", "0", "0"]
    # Fragmentation: free (reserved-idle included), most free on one node, slots of 1, 2, 4, 8 (whole-GPU nodes only).
    assert row(html, "fragmentation-a100-80gb") == ["a100-80gb", "15.429", "8", "8", "4", "2", "1"]
    assert row(html, "fragmentation-l4") == ["l4", "16", "4", "16", "8", "4", "0"]
    nodes = [n for n in ("a100-01", "a100-02") if row(html, f"node-{n}")[3] == "8"]
    assert len(nodes) == 1
    assert row(html, "node-h100-05")[5:7] == ["cordoned", "NVLink replacement"]
    assert row(html, "node-l4-04")[5] == "unhealthy"


def test_gpus_a_team_holds_on_its_reservation_are_not_borrowed(
    sim_cluster, example_policy, ada, sara
):
    # Search holds 4 L4s on its reservation (search-inference) and 1 on its quota: the Teams
    # table said "borrowed 3" where the quota grid said using 1 of a nominal 2.
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    for queue, capability, gpus in (("inference", "inference-16gb", 4), ("batch", "fp8", 1)):
        JobFactory(
            owner=sara,
            team=Team.objects.get(name="search"),
            queue=Queue.objects.get(name=queue),
            capability_class=CapabilityClass.objects.get(name=capability),
            gpus_per_pod=gpus,
            env={"SIM_DURATION_SECONDS": "3600"},
        )
    for _ in range(3):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(10)
    cluster.close()

    html = client_for(ada).get("/ops/").content.decode()
    teams = re.search(r'data-testid="team-usage">(.*?)</table>', html, re.S).group(1)
    cells = [
        re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", teams, re.S)
    ]
    search_l4 = next(c for c in cells if c[:2] == ["search", "l4"])

    # held, normalized, nominal, borrowing limit, borrowed, on reservations
    assert search_l4[2:] == ["5", "5", "2", "2", "0", "4"]
