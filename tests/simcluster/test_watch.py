"""Watches: resuming from a resourceVersion, selections, bookmarks and 410 Expired."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from tests.simcluster.manifests import gpu_job

NS = "team-vision"


@pytest.fixture
def cluster(sim_cluster):
    sim_cluster.core().create_namespace({"metadata": {"name": NS}})
    return sim_cluster


def collect(func, *args, until: int, **kwargs) -> list[tuple[str, str, str]]:
    """(type, name, phase or resourceVersion) of watch events until ``until`` of them came."""
    stream, seen = watch.Watch(), []
    for event in stream.stream(func, *args, timeout_seconds=3, **kwargs):
        obj = event["object"]
        if event["type"] == "BOOKMARK":
            seen.append(("BOOKMARK", "", obj["metadata"]["resourceVersion"]))
        else:
            seen.append((event["type"], obj.metadata.name, getattr(obj.status, "phase", "") or ""))
        if len(seen) >= until:
            stream.stop()
    return seen


def test_a_pod_watch_resumes_after_the_listed_resource_version(cluster):
    core = cluster.core()
    since = core.list_pod_for_all_namespaces().metadata.resource_version
    cluster.batch().create_namespaced_job(NS, gpu_job("w", duration=10))
    cluster.advance(12)

    events = collect(core.list_pod_for_all_namespaces, resource_version=since, until=4)

    name = events[0][1]
    assert events == [
        ("ADDED", name, "Pending"),
        ("MODIFIED", name, "Pending"),
        ("MODIFIED", name, "Running"),
        ("MODIFIED", name, "Succeeded"),
    ]


def test_each_watch_event_keeps_the_resource_version_it_was_written_with(cluster):
    core = cluster.core()
    since = core.list_pod_for_all_namespaces().metadata.resource_version
    cluster.batch().create_namespaced_job(NS, gpu_job("rv", duration=10))
    cluster.advance(12)

    stream, versions = watch.Watch(), []
    for event in stream.stream(
        core.list_pod_for_all_namespaces, resource_version=since, timeout_seconds=2
    ):
        versions.append(int(event["object"].metadata.resource_version))
        if event["object"].status.phase == "Succeeded":
            stream.stop()

    assert len(versions) == 4
    assert versions == sorted(set(versions))


def test_resource_versions_increase_with_every_change(cluster):
    core = cluster.core()
    first = int(core.list_node().metadata.resource_version)
    patched = core.patch_node("l4-01", {"metadata": {"labels": {"x": "1"}}})
    second = int(core.list_node().metadata.resource_version)

    assert first < int(patched.metadata.resource_version) <= second


def test_objects_leaving_a_field_selection_are_deleted_from_the_watch(cluster):
    core = cluster.core()
    since = core.list_namespaced_pod(NS).metadata.resource_version
    cluster.batch().create_namespaced_job(NS, gpu_job("sel", duration=10))
    cluster.advance(12)

    events = collect(
        core.list_namespaced_pod,
        NS,
        resource_version=since,
        field_selector="status.phase=Running",
        until=2,
    )

    assert [(kind, phase) for kind, _, phase in events] == [
        ("ADDED", "Running"),
        ("DELETED", "Succeeded"),
    ]


def test_a_job_watch_sees_status_changes(cluster):
    batch = cluster.batch()
    since = batch.list_job_for_all_namespaces().metadata.resource_version
    batch.create_namespaced_job(NS, gpu_job("jw", duration=5))
    cluster.advance(7)

    stream, conditions = watch.Watch(), []
    for event in stream.stream(
        batch.list_job_for_all_namespaces, resource_version=since, timeout_seconds=2
    ):
        conditions = [c.type for c in event["object"].status.conditions or []]
        if "Complete" in conditions:
            stream.stop()

    assert conditions == ["SuccessCriteriaMet", "Complete"]


def test_an_idle_watch_sends_bookmarks_when_allowed(cluster):
    core = cluster.core()
    current = core.list_node().metadata.resource_version

    events = collect(core.list_node, resource_version=current, allow_watch_bookmarks=True, until=1)

    assert events == [("BOOKMARK", "", current)]


def test_a_too_old_resource_version_raises_410(sim_cluster_factory):
    small = sim_cluster_factory(history_size=5)
    core = small.core()
    since = core.list_node().metadata.resource_version
    for number in range(6):
        core.patch_node("l4-01", {"metadata": {"labels": {"n": str(number)}}})

    with pytest.raises(client.ApiException) as timed:
        collect(core.list_node, resource_version=since, until=1)
    stream = watch.Watch()
    with pytest.raises(client.ApiException) as retried:
        # Without timeout_seconds the client retries once by itself, then gives up.
        for _ in stream.stream(core.list_node, resource_version=since):
            pass

    assert timed.value.status == 410
    assert retried.value.status == 410
    assert "Expired: too old resource version" in retried.value.reason


def test_a_watch_from_the_latest_list_still_works_after_expiry(sim_cluster_factory):
    small = sim_cluster_factory(history_size=5)
    core = small.core()
    for number in range(6):
        core.patch_node("l4-01", {"metadata": {"labels": {"n": str(number)}}})
    fresh = core.list_node().metadata.resource_version
    core.patch_node("l4-02", {"metadata": {"labels": {"n": "x"}}})

    assert collect(core.list_node, resource_version=fresh, until=1) == [("MODIFIED", "l4-02", "")]


def test_lists_page_with_limit_and_continue(cluster):
    core = cluster.core()

    first = core.list_node(limit=10)
    rest = core.list_node(limit=10, _continue=first.metadata._continue)

    assert len(first.items) == 10
    assert first.metadata.remaining_item_count == 8
    assert len(rest.items) == 8 and not rest.metadata._continue
    assert [n.metadata.name for n in first.items + rest.items] == sorted(
        n.metadata.name for n in core.list_node().items
    )
