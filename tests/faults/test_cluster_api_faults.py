"""The cluster's API answering 500s, timing out, expiring watches and restarting: the portal
keeps serving its pages and API, shows pending jobs ``ClusterUnreachable`` with since when, and
converges afterwards, with usage intervals that are the pods' own times.

The reconcile runs as the worker runs it: cycles reading the watch-fed mirror, over HTTP with the
official client, against the simulated cluster (its clock moved by the test)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.models import ApiToken
from queues.cluster.adapter import Cluster
from queues.cluster.mirror import ClusterMirror
from queues.models import CapabilityClass, ClusterStatus, Job, JobState, Queue, Team, UsageInterval
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory
from tests.faults.invariants import assert_nothing_lost
from tests.faults.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def submit(user, seconds: int) -> Job:
    return JobFactory(
        owner=user,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        env={"SIM_DURATION_SECONDS": str(seconds)},
    )


def test_the_portal_rides_out_a_failing_cluster_api_and_converges(sim_cluster, mia):
    # Short client timeouts, as a worker that must not hang on a cluster that does not answer.
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig), timeout=(1, 2))
    mirror = ClusterMirror(cluster).start()
    page, api = Client(), APIClient()
    page.force_login(mia)
    _, key = ApiToken.issue(user=mia, name="script")
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    def cycle():
        return reconcile_cycle(cluster=cluster, now=sim_cluster.now(), mirror=mirror)

    def mirrored(condition):
        """Cycle until the mirror has caught up with the cluster and ``condition`` holds."""
        return wait_until(lambda: (cycle(), condition())[1], seconds=60, what="converged")

    try:
        assert mirror.wait_synced(10)
        running = submit(mia, seconds=600)
        mirrored(lambda: Job.objects.get(pk=running.pk).state == JobState.ADMITTED)
        sim_cluster.advance(30)
        mirrored(lambda: Job.objects.get(pk=running.pk).state == JobState.RUNNING)

        # 1. Every request fails with 500: the watches break and cannot list again.
        sim_cluster.fail_requests(10_000, status=500)
        sim_cluster.expire_watches()
        wait_until(mirror.error, seconds=30, what="the mirror sees the 500s")
        waiting = submit(mia, seconds=600)
        report = wait_until(lambda: (r := cycle()).unreachable and r, seconds=60, what="500s seen")
        since = ClusterStatus.objects.get().unreachable_since
        assert report.unreachable.startswith(("nodes:", "pods:", "jobs:"))
        waiting.refresh_from_db()
        assert waiting.state == JobState.PENDING
        (reason,) = waiting.pending_reasons
        assert (reason["code"], reason["details"]) == (
            "ClusterUnreachable",
            {"since": since.isoformat()},
        )
        # The portal keeps serving, and says why and since when.
        detail = page.get(f"/jobs/{waiting.pk}/")
        assert detail.status_code == 200
        assert b"ClusterUnreachable" in detail.content
        assert b"the portal cannot reach the cluster since" in detail.content
        listed = api.get(f"/api/jobs/{waiting.pk}/")
        assert listed.status_code == 200
        assert listed.json()["pending_reasons"][0]["code"] == "ClusterUnreachable"
        assert page.get("/queues/").status_code == 200
        # A later failing cycle keeps the first moment it failed.
        cycle()
        assert ClusterStatus.objects.get().unreachable_since == since

        # 2. The errors stop but answers come too late for the client.
        sim_cluster.clear_faults()
        sim_cluster.delay_requests(3, count=20)
        # 3. Watches expire meanwhile: the mirror must list again.
        sim_cluster.expire_watches()
        sim_cluster.gone_next_watch(3)
        mirrored(lambda: Job.objects.get(pk=waiting.pk).state == JobState.ADMITTED)
        assert ClusterStatus.objects.get().reachable

        # 4. The API server restarts while the pods finish: nothing is seen until it is back.
        sim_cluster.stop_server()
        sim_cluster.advance(30)  # the waiting job's pod starts …
        sim_cluster.advance(600)  # … and both jobs' pods finish while nobody can see it
        assert wait_until(lambda: cycle().unreachable, seconds=60, what="the restart seen")
        assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
        assert page.get(f"/jobs/{running.pk}/").status_code == 200
        sim_cluster.start_server()
        mirrored(lambda: set(Job.objects.values_list("state", flat=True)) == {JobState.SUCCEEDED})
        assert ClusterStatus.objects.get().reachable
    finally:
        mirror.stop()
        cluster.close()

    # Usage is the pods' real run, to the second, though the portal saw the end late.
    intervals = list(UsageInterval.objects.order_by("job_id"))
    assert [i.job_id for i in intervals] == [running.pk, waiting.pk]
    assert all(i.ended_at - i.started_at == timedelta(seconds=600) for i in intervals)
    assert not any(i.end_estimated for i in intervals)
    assert_nothing_lost(sim_cluster)
