"""The queue catalog: pages and API, filled from the database, scoped to the member's teams."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from queues.models import Queue
from tests.factories import QueueFactory, TeamFactory

pytestmark = pytest.mark.django_db


def page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


class TestCatalogPage:
    def test_anonymous_visitors_are_sent_to_the_login(self, client, example_policy):
        response = client.get("/queues/")

        assert response.status_code == 302
        assert response["Location"] == "/login/?next=/queues/"

    def test_a_member_sees_the_terms_of_every_queue_their_teams_may_use(self, mia):
        response = page_client(mia).get("/queues/")

        assert response.status_code == 200
        names = [q.name for q, _ in response.context["queues"]]
        # mia is in vision and nlp; inference is for search and speech only.
        assert names == ["interactive", "interactive-mig", "training", "batch"]
        html = response.content.decode()
        batch = html[html.index('id="queue-batch"') :]
        batch = batch[: batch.index("</article>")]
        for term in (
            "target 2h",
            "default 12h, at most 3d",
            "preemptible: its pods get 30s to stop",
            "exclusive GPUs",
            "required every 30m",
            "up to 8 GPUs",
            "any number of running jobs",
            "16 GPUs",
            "may borrow idle GPUs beyond the team's quota",
        ):
            assert term in batch, term
        training = html[html.index('id="queue-training"') :]
        assert "graceful: its pods get 10m to stop" in training
        assert "a gang's pods all in the same network domain" in training

    def test_the_catalog_follows_the_database_not_a_template(self, mia):
        Queue.objects.filter(name="batch").update(description="Changed by an admin just now.")
        queue = QueueFactory(name="debug", description="A brand-new queue.")
        queue.teams.add(mia.gpu_teams.first())

        html = page_client(mia).get("/queues/").content.decode()

        assert "Changed by an admin just now." in html
        assert "A brand-new queue." in html

    def test_a_member_of_no_team_is_told_how_to_get_access(self, outsider, example_policy):
        html = page_client(outsider).get("/queues/").content.decode()

        assert (
            "You are in no team, so no queue is open to you. Teams come from the policy and "
            "from your groups at your identity provider: ask an admin to add you to one."
        ) in html

    def test_an_admin_sees_every_queue(self, ada, example_policy):
        response = page_client(ada).get("/queues/")

        assert len(response.context["queues"]) == 5

    def test_inactive_queues_are_hidden(self, mia):
        Queue.objects.filter(name="batch").update(active=False)

        response = page_client(mia).get("/queues/")

        assert "batch" not in [q.name for q, _ in response.context["queues"]]

    def test_listing_costs_the_same_queries_however_many_queues(self, mia):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        client = page_client(mia)
        client.get("/queues/")
        with CaptureQueriesContext(connection) as few:
            client.get("/queues/")
        team = mia.gpu_teams.first()
        for n in range(20):
            QueueFactory(name=f"extra-{n}").teams.add(team)

        with CaptureQueriesContext(connection) as many:
            response = client.get("/queues/")

        assert len(response.context["queues"]) == 24
        assert len(many.captured_queries) == len(few.captured_queries)


class TestQueueDetailPage:
    def test_it_shows_one_queue_in_full_with_its_capability_resolution(self, mia):
        response = page_client(mia).get("/queues/training/")

        assert response.status_code == 200
        html = response.content.decode()
        assert "Queue training" in html
        assert "0 to 10 (default 5)" in html
        row = html[html.index('id="capability-fp8"') :]
        row = row[: row.index("</tr>")]
        assert '<span class="chip">h100-80gb</span>' in row
        assert "a100-80gb: lacks fp8" in row
        rdma = html[html.index('id="capability-multi-node-rdma"') :]
        assert (
            '<td data-label="Asks for">≥ 80 GB HBM, bf16, RDMA, tier ≥ 3</td>'
            in rdma[: rdma.index("</tr>")]
        )

    def test_a_queue_the_member_may_not_use_is_not_found(self, mia):
        assert page_client(mia).get("/queues/inference/").status_code == 404

    def test_an_unknown_queue_is_not_found(self, mia):
        assert page_client(mia).get("/queues/nope/").status_code == 404


class TestCatalogApi:
    def test_anonymous_calls_get_401_with_a_challenge(self, api, example_policy):
        for url in (
            "/api/queues/",
            "/api/queues/batch/",
            "/api/gpu-classes/",
            "/api/capability-classes/",
        ):
            response = api.get(url)
            assert response.status_code == 401, url
            assert response["WWW-Authenticate"] == "Token", url

    def test_a_bad_token_is_refused(self, api, example_policy):
        api.credentials(HTTP_AUTHORIZATION="Token gpt_not-a-real-key")

        response = api.get("/api/queues/")

        assert response.status_code == 401
        assert response.json() == {"detail": "Invalid or revoked token."}

    def test_queues_lists_the_terms_of_the_callers_queues(self, api_as, mia):
        response = api_as(mia).get("/api/queues/")

        assert response.status_code == 200
        body = response.json()
        assert body["count"] == 4
        batch = next(q for q in body["results"] if q["name"] == "batch")
        live = batch.pop("live")
        assert set(live) == {
            "expected_wait_seconds",
            "expected_wait_latest_seconds",
            "expected_wait_note",
            "wait_p50_seconds",
            "wait_p90_seconds",
            "pending",
            "running",
            "capacity",
        }
        assert [c["gpu_class"] for c in live["capacity"]] == ["t4", "l4", "a100-80gb", "h100-80gb"]
        assert batch == {
            "name": "batch",
            "description": "Long jobs on whatever is spare. Preemptible; checkpoint every 30 minutes.",
            "priority": 10,
            "expected_wait_target": "2h",
            "max_runtime": "3d",
            "default_runtime": "12h",
            "preemption_class": "preemptible",
            "grace_period": None,
            "sharing_mode": "exclusive",
            "allowed_gpu_classes": ["t4", "l4", "a100-80gb", "h100-80gb"],
            "allowed_capability_classes": [
                "any-gpu",
                "bf16-large",
                "fp8",
                "inference-16gb",
                "min-40gb",
            ],
            "checkpoint_interval": "30m",
            "max_gpus_per_job": "8.000",
            "max_running_jobs_per_user": None,
            "max_gpus_per_user": "16.000",
            "job_priority": {"min": 0, "default": 5, "max": 10},
            "teams": ["nlp", "research", "search", "speech", "vision"],
            "may_borrow": True,
            "reservation_only": False,
            "required_topology": "",
        }

    def test_one_queue_by_name_and_404_for_queues_of_other_teams(self, api_as, mia, sara):
        assert api_as(mia).get("/api/queues/training/").json()["grace_period"] == "10m"
        assert api_as(mia).get("/api/queues/inference/").status_code == 404
        assert api_as(sara).get("/api/queues/inference/").json()["reservation_only"] is True

    def test_session_authentication_works_for_the_pages_javascript(self, mia):
        response = page_client(mia).get("/api/queues/")

        assert response.status_code == 200

    def test_gpu_classes(self, api_as, mia):
        body = api_as(mia).get("/api/gpu-classes/").json()

        assert [g["name"] for g in body["results"]] == ["t4", "l4", "a100-80gb", "h100-80gb"]
        t4 = body["results"][0]
        assert t4 == {
            "name": "t4",
            "product": "Tesla-T4",
            "description": "Turing, 16 GB; time-sliced for notebooks.",
            "hbm_gb": 16,
            "precisions": ["fp16", "int8"],
            "mig_profiles": {},
            "rdma": False,
            "tier": 1,
        }

    def test_capability_classes_say_what_they_resolve_to_and_why_not(self, api_as, mia):
        response = api_as(mia).get("/api/capability-classes/bf16-large/")

        assert response.json()["resolves_to"] == ["a100-80gb", "h100-80gb"]
        assert response.json()["does_not_match"] == [
            {"gpu_class": "t4", "reasons": ["HBM 16 GB < 40 GB required", "lacks bf16"]},
            {"gpu_class": "l4", "reasons": ["HBM 24 GB < 40 GB required"]},
        ]

    def test_a_mig_capability_class_resolves_to_gpus_that_offer_the_profile(self, api_as, mia):
        body = api_as(mia).get("/api/capability-classes/mig-3g.40gb/").json()

        assert body["resolves_to"] == ["a100-80gb", "h100-80gb"]
        assert body["does_not_match"][0] == {
            "gpu_class": "t4",
            "reasons": ["no MIG profile 3g.40gb (offers: none)"],
        }

    def test_the_openapi_schema_and_docs_are_served(self, mia):
        client = page_client(mia)

        schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        docs = client.get("/api/docs/")

        assert schema.status_code == 200
        assert "/api/queues/{name}/" in schema.json()["paths"]
        assert docs.status_code == 200
        assert b"swagger-ui" in docs.content

    def test_queue_api_costs_the_same_queries_however_many_queues(
        self, api_as, mia, django_assert_max_num_queries
    ):
        client = api_as(mia)
        team = TeamFactory()
        team.members.add(mia)
        for n in range(15):
            QueueFactory(name=f"more-{n}").teams.add(team)

        # the terms, and the live state of the answered queues (capacity, estimates, stats)
        with django_assert_max_num_queries(11):
            response = client.get("/api/queues/?page_size=100")

        assert response.json()["count"] == 19


class TestLiveState:
    def test_the_catalog_shows_the_soonest_expected_wait_of_the_members_teams(self, mia):
        from datetime import timedelta

        from django.utils import timezone

        from queues.models import QueueEstimate, Team

        now = timezone.now()
        batch = Queue.objects.get(name="batch")
        for team, minutes in (("vision", 30), ("nlp", 120), ("speech", 1)):
            QueueEstimate.objects.create(
                queue=batch,
                team=Team.objects.get(name=team),
                estimated_start=now + timedelta(minutes=minutes, seconds=30),
                computed_at=now,
            )

        response = page_client(mia).get("/queues/")

        live = dict((q.name, state) for q, state in response.context["queues"])["batch"]
        assert timedelta(minutes=29) < live.expected_wait <= timedelta(minutes=31)
        html = response.content.decode()
        batch_card = html[html.index('id="queue-batch"') :]
        assert "Expected wait now" in batch_card
        assert "(target 2h; for a 1-GPU job of 12h on the cheapest allowed class" in batch_card
        assert "~30m" in batch_card  # an estimate is rounded as people say it

    def test_the_expected_wait_is_the_likely_one_with_its_bound_on_page_and_api(self, mia):
        from datetime import timedelta

        from django.utils import timezone

        from queues.models import QueueEstimate, Team

        now = timezone.now()
        batch = Queue.objects.get(name="batch")
        QueueEstimate.objects.create(
            queue=batch,
            team=Team.objects.get(name="vision"),
            estimated_start=now + timedelta(minutes=90, seconds=30),
            likely_start=now + timedelta(minutes=40, seconds=30),
            computed_at=now,
        )

        response = page_client(mia).get("/queues/")

        live = dict((q.name, state) for q, state in response.context["queues"])["batch"]
        assert timedelta(minutes=40) < live.expected_wait <= timedelta(minutes=41)
        assert timedelta(minutes=90) < live.expected_wait_latest <= timedelta(minutes=91)
        html = response.content.decode()
        batch_card = html[html.index('id="queue-batch"') :]
        assert "likely ~40m, at the latest ~1h30m" in batch_card
        client = APIClient()
        client.force_authenticate(mia)
        api = client.get("/api/queues/batch/").json()["live"]
        assert 2400 <= api["expected_wait_seconds"] <= 2430
        assert 5400 <= api["expected_wait_latest_seconds"] <= 5430

    def test_a_projected_expected_wait_says_so_on_page_and_api(self, mia):
        # with more than 1,500 waiting the queue's default job is projected
        # (queues/admission/projection.py); the wait says so beside it
        from datetime import timedelta

        from django.utils import timezone

        from queues.admission import PROJECTED_NOTE
        from queues.models import QueueEstimate, Team

        now = timezone.now()
        batch = Queue.objects.get(name="batch")
        QueueEstimate.objects.create(
            queue=batch,
            team=Team.objects.get(name="vision"),
            estimated_start=now + timedelta(days=3, minutes=1),
            likely_start=now + timedelta(days=2, minutes=1),
            note=PROJECTED_NOTE,
            computed_at=now,
        )

        html = page_client(mia).get("/queues/").content.decode()

        batch_card = html[html.index('id="queue-batch"') :]
        assert f'<span class="hint" data-testid="expected-note">({PROJECTED_NOTE})</span>' in (
            batch_card
        )
        client = APIClient()
        client.force_authenticate(mia)
        api = client.get("/api/queues/batch/").json()["live"]
        assert api["expected_wait_note"] == PROJECTED_NOTE

    def test_free_gpus_count_healthy_in_service_capacity_minus_what_pods_hold(self, mia):
        from decimal import Decimal

        from queues.models import GpuClass, Job, Node
        from tests.factories import JobFactory

        a100 = GpuClass.objects.get(name="a100-80gb")
        Node.objects.create(name="a1", gpu_class=a100, gpu_count=8, gpus_used_outside=Decimal(1))
        Node.objects.create(name="a2", gpu_class=a100, gpu_count=8, healthy=False)
        Node.objects.create(name="a3", gpu_class=a100, gpu_count=8, maintenance="cordoned")
        Node.objects.create(name="mig", gpu_class=a100, gpu_count=4, mig_layout={"3g.40gb": 8})
        JobFactory(state="running", gpu_class=a100, nodes=["a1", "a1"], pods=2, gpus_per_pod=2)
        JobFactory(
            state="running",
            gpu_class=a100,
            nodes=["mig"],
            pods=1,
            gpus_per_pod=1,
            mig_profile="3g.40gb",
        )
        assert Job.objects.count() == 2
        from django.utils import timezone

        from queues.catalog.services import queue_stats_refresh

        queue_stats_refresh(now=timezone.now())  # what every reconcile does

        live = dict(
            (q.name, state) for q, state in page_client(mia).get("/queues/").context["queues"]
        )

        # 8 − 1 outside − 4 held on a1, plus 8 × 3/7 − 3/7 on the MIG node = 3 + 3 = 6.
        assert live["training"].free["a100-80gb"] == Decimal("6.00")

        # The API publishes the same numbers beside the terms, per allowed class.
        api = APIClient()
        api.force_authenticate(mia)
        body = api.get("/api/queues/training/").json()
        a100_live = next(c for c in body["live"]["capacity"] if c["gpu_class"] == "a100-80gb")
        assert a100_live == {
            "gpu_class": "a100-80gb",
            "free": "6.00",
            "in_service": 12,  # a1 and the MIG node
            "maintenance": 8,  # a3, cordoned
            "unhealthy": 8,  # a2
            "used_outside": "1.000",
        }
        assert body["live"]["expected_wait_note"] == "no estimate yet"

    def test_a_pod_on_a_time_sliced_node_holds_its_replicas_share(self, example_policy):
        from decimal import Decimal

        from django.utils import timezone

        from queues.catalog.selectors import free_gpu_equivalents
        from queues.models import GpuClass, Node
        from tests.factories import JobFactory

        t4 = GpuClass.objects.get(name="t4")
        Node.objects.create(name="t4-sliced", gpu_class=t4, gpu_count=4, time_slice_replicas=4)
        Node.objects.create(name="t4-whole", gpu_class=t4, gpu_count=2)
        JobFactory(state="running", gpu_class=t4, nodes=["t4-sliced"], pods=1, gpus_per_pod=1)
        JobFactory(state="admitted", gpu_class=t4, nodes=["t4-sliced"] * 2, pods=2, gpus_per_pod=1)
        JobFactory(state="running", gpu_class=t4, nodes=["t4-whole"], pods=1, gpus_per_pod=2)
        JobFactory(state="succeeded", gpu_class=t4, nodes=["t4-whole"], pods=1, gpus_per_pod=2)

        # 4 + 2 GPUs; 1/4 + 2 × 1/4 of the sliced node's and both whole ones held: 6 − 2.75.
        assert free_gpu_equivalents(timezone.now())["t4"] == Decimal("3.25")

    def test_a_queue_shows_its_waiting_jobs_in_plan_order_without_other_teams_details(self, mia):
        from django.contrib.auth import get_user_model

        from queues.models import CapabilityClass, Team
        from tests.factories import JobFactory

        batch = Queue.objects.get(name="batch")
        any_gpu = CapabilityClass.objects.get(name="any-gpu")
        sam = get_user_model().objects.get(username="sam")
        reason = [
            {
                "code": "QuotaExceeded",
                "message": "team speech: l4 quota 4/4 in use",
                "details": {},
                "hint": "",
            }
        ]
        JobFactory(
            owner=sam,
            team=Team.objects.get(name="speech"),
            queue=batch,
            capability_class=any_gpu,
            name="secret-speech-run",
            image="registry.example/secret:1",
            position=1,
            queue_length=2,
            pending_reasons=reason,
        )
        mine = JobFactory(
            owner=mia,
            team=Team.objects.get(name="vision"),
            queue=batch,
            capability_class=any_gpu,
            name="my-run",
            position=2,
            queue_length=2,
        )

        response = page_client(mia).get("/queues/batch/")

        html = response.content.decode()
        entries = response.context["pending"]
        assert [(e.position, e.label) for e in entries] == [
            (1, "another team's job"),
            (2, "my-run"),
        ]
        assert entries[1].job == mine
        assert "secret-speech-run" not in html
        assert "registry.example/secret" not in html
        assert "team speech: l4 quota 4/4 in use" not in html
        # another team's reason in plain words, its code small beside it
        assert 'team quota used up <small class="code">QuotaExceeded</small>' in html
