"""Pods: who holds which GPUs, and what happened to them, from the API's JSON."""

from __future__ import annotations

from datetime import UTC, datetime

from queues.cluster.pods import devices_held, pod_devices, pod_facts


def pod(name, node="n1", phase="Running", limits=None, labels=None, init_limits=None, **extra):
    spec = {
        "nodeName": node,
        "containers": [{"name": "main", "resources": {"limits": limits or {}}}],
    }
    if init_limits:
        spec["initContainers"] = [{"name": "init", "resources": {"limits": init_limits}}]
    metadata = {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "labels": labels or {}}
    metadata.update(extra.pop("metadata", {}))
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase, **extra}}


def test_devices_come_from_limits_and_mig_resources():
    assert pod_devices(pod("a", limits={"nvidia.com/gpu": "2", "cpu": "4"})) == {"gpu": 2}
    assert pod_devices(pod("b", limits={"nvidia.com/mig-1g.10gb": 1})) == {"1g.10gb": 1}
    assert pod_devices(
        pod("c", limits={"nvidia.com/gpu": "1"}, init_limits={"nvidia.com/gpu": "4"})
    ) == {"gpu": 4}
    assert pod_devices(pod("d", limits={"cpu": "1"})) == {}


def test_portal_pods_are_told_apart_from_pods_the_portal_did_not_create():
    pods = [
        pod("mine-0", limits={"nvidia.com/gpu": "4"}, labels={"gpuportal.io/job-id": "12"}),
        pod("theirs", limits={"nvidia.com/gpu": "2"}),
        pod("done", phase="Succeeded", limits={"nvidia.com/gpu": "8"}),
        pod("pending", node="", phase="Pending", limits={"nvidia.com/gpu": "8"}),
        pod("slice", node="mig-1", limits={"nvidia.com/mig-3g.40gb": "1"}),
        pod(
            "leaving",
            limits={"nvidia.com/gpu": "1"},
            labels={"gpuportal.io/job-id": "13"},
            metadata={"deletionTimestamp": "2026-12-02T10:00:00Z"},
        ),
    ]

    use = devices_held(pod_facts(p) for p in pods)

    assert dict(use["n1"].portal) == {"gpu": 5}  # a terminating pod still holds its GPU
    assert dict(use["n1"].outside) == {"gpu": 2}
    assert dict(use["mig-1"].outside) == {"3g.40gb": 1}
    assert set(use) == {"n1", "mig-1"}


def test_a_finished_container_reports_times_exit_code_and_reason():
    facts = pod_facts(
        pod(
            "oom",
            phase="Failed",
            labels={"gpuportal.io/job-id": "7"},
            metadata={"annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
            containerStatuses=[
                {
                    "state": {
                        "terminated": {
                            "startedAt": "2026-12-02T10:00:00Z",
                            "finishedAt": "2026-12-02T10:30:00Z",
                            "exitCode": 137,
                            "reason": "OOMKilled",
                        }
                    }
                }
            ],
        )
    )

    assert (facts.job_id, facts.index, facts.phase) == (7, 3, "Failed")
    assert facts.container.started_at == datetime(2026, 12, 2, 10, tzinfo=UTC)
    assert facts.container.finished_at == datetime(2026, 12, 2, 10, 30, tzinfo=UTC)
    assert (facts.container.exit_code, facts.container.reason) == (137, "OOMKilled")


def test_a_waiting_container_and_the_schedulers_message_are_kept():
    facts = pod_facts(
        pod(
            "stuck",
            node="",
            phase="Pending",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                }
            ],
            containerStatuses=[
                {"state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}
            ],
        )
    )

    assert facts.unschedulable_message == "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    assert (facts.container.reason, facts.container.message) == ("ErrImagePull", "not found")
    assert not facts.holds_gpus
