"""The synthetic site the reconcile and web benchmarks share: 50 teams, 12 queues, 4 GPU classes.

``policy_yaml()`` is a policy file for ``apply_policy``; ``cluster_spec()`` is a simulated cluster
(a ``parse_cluster`` dict) whose healthy capacity carries the policy's quotas; ``node_rows()`` is
the same cluster as the node mirror the reconcile would write (for benchmarks that run none).
Deterministic; imports no Django at module level.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from queues.policy import text as policy_text  # noqa: E402 (pure: yaml, no Django)

TEAMS = 50
NODES_PER_CLASS = 168
GPUS_PER_NODE = 8
NOMINAL_PER_CLASS = 26  # 50 x 26 = 1,300 of each class's 1,344 GPUs
MEMBERS_PER_TEAM = 4
BENCH_USER = "bench"
BENCH_TEAMS = 3  # the benchmark user is a member of the first three teams

GPU_CLASSES = [
    # name, product, hbm, precisions, tier
    ("h100-80gb", "NVIDIA-H100-80GB-HBM3", 80, ["tf32", "bf16", "fp16", "fp8", "int8"], 4),
    ("a100-80gb", "NVIDIA-A100-SXM4-80GB", 80, ["tf32", "bf16", "fp16", "int8"], 3),
    ("l40s-48gb", "NVIDIA-L40S", 48, ["tf32", "bf16", "fp16", "fp8", "int8"], 2),
    ("l4-24gb", "NVIDIA-L4", 24, ["tf32", "bf16", "fp16", "fp8", "int8"], 1),
]
ALL = [g[0] for g in GPU_CLASSES]
# name, priority, preemption, allowed GPU classes, max runtime
QUEUES = [
    ("interactive", 100, "never", ALL, "8h"),
    ("debug", 90, "never", ["l4-24gb", "l40s-48gb"], "2h"),
    ("inference-dev", 80, "never", ["l4-24gb", "l40s-48gb"], "1d"),
    ("eval", 70, "never", ALL, "12h"),
    ("training", 60, "never", ["h100-80gb", "a100-80gb"], "7d"),
    ("training-large", 55, "never", ["h100-80gb"], "7d"),
    ("finetune", 50, "never", ["h100-80gb", "a100-80gb", "l40s-48gb"], "3d"),
    ("research", 40, "never", ALL, "3d"),
    ("sweeps", 30, "never", ["a100-80gb", "l40s-48gb"], "1d"),
    ("cheap", 20, "never", ["l4-24gb"], "1d"),
    ("batch", 10, "preemptible", ALL, "3d"),
    ("scavenger", 0, "preemptible", ALL, "1d"),
]


def team_name(i: int) -> str:
    return f"team-{i:02d}"


def member_names(i: int) -> list[str]:
    names = [f"u{i:02d}-{m}" for m in range(MEMBERS_PER_TEAM)]
    return [*names, BENCH_USER] if i < BENCH_TEAMS else names


def policy() -> dict[str, Any]:
    teams = [
        {
            "name": team_name(i),
            "namespace": team_name(i),
            "cost_center": f"CC-{1000 + i}",
            "fair_share_weight": 1 + i % 3,
            "members": member_names(i),
            "quotas": {
                g: {"nominal": NOMINAL_PER_CLASS, "borrowing_limit": NOMINAL_PER_CLASS} for g in ALL
            },
        }
        for i in range(TEAMS)
    ]
    queues = []
    for name, priority, preemption, classes, max_runtime in QUEUES:
        queue: dict[str, Any] = {
            "name": name,
            "priority": priority,
            "expected_wait_target": "30m" if priority >= 50 else "4h",
            "max_runtime": max_runtime,
            "default_runtime": "1h",
            "preemption_class": preemption,
            "sharing_mode": "exclusive",
            "allowed_gpu_classes": classes,
            "allowed_capability_classes": ["any-gpu", "bf16"]
            + (["min-40gb"] if set(classes) - {"l4-24gb"} else []),
            "max_gpus_per_job": 8,
            "teams": [team_name(i) for i in range(TEAMS)],
        }
        if preemption == "preemptible":
            queue.update(checkpoint_interval="30m", may_borrow=True)
        queues.append(queue)
    return {
        "fair_share": {"usage_half_life": "7d"},
        "gpu_classes": [
            {"name": n, "product": p, "hbm_gb": hbm, "precisions": prec, "tier": tier}
            for n, p, hbm, prec, tier in GPU_CLASSES
        ],
        "capability_classes": [
            {"name": "any-gpu", "description": "Any GPU."},
            {"name": "min-40gb", "description": "40 GB or more.", "min_hbm_gb": 40},
            {"name": "bf16", "description": "bf16.", "precisions": ["bf16"]},
        ],
        "teams": teams,
        "queues": queues,
        "rate_cards": [
            {
                "effective_from": "2026-01-01T00:00:00Z",
                "currency": "EUR",
                "price_per_normalized_gpu_hour": 1.2,
                "weights": {"h100-80gb": 4, "a100-80gb": 2.5, "l40s-48gb": 1.5, "l4-24gb": 1},
            }
        ],
    }


def policy_yaml() -> str:
    return policy_text.policy_yaml(policy())


def node_names() -> list[tuple[str, str]]:
    """(node name, GPU class) of every node, class by class."""
    return [(f"{g}-{i:03d}", g) for g, *_ in GPU_CLASSES for i in range(NODES_PER_CLASS)]


def cluster_spec() -> dict[str, Any]:
    """The simulated cluster: 4 x 168 nodes x 8 GPUs = 5,376 GPUs, 8 nodes to a rack."""
    groups = []
    for name, product, hbm, _, _ in GPU_CLASSES:
        groups.append(
            {
                "name": name,
                "labels": {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.count": str(GPUS_PER_NODE),
                    "nvidia.com/gpu.memory": str(hbm * 1024),
                },
                "allocatable": {
                    "cpu": "190",
                    "memory": "1900Gi",
                    "nvidia.com/gpu": str(GPUS_PER_NODE),
                },
                "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                "nodes": [
                    {
                        "name": f"{name}-{i:03d}",
                        "labels": {"topology.kubernetes.io/rack": f"{name}-rack-{i // 8:02d}"},
                    }
                    for i in range(NODES_PER_CLASS)
                ],
            }
        )
    return {
        "simulation": {"default_duration_seconds": 86_400, "image_pull_seconds": 2},
        "node_defaults": {"allocatable": {"pods": "110"}},
        "node_groups": groups,
    }


# --- Django and PostgreSQL -----------------------------------------------------------------------


def django_env(database: str) -> dict[str, str]:
    """The environment of a production-like portal on a local PostgreSQL database."""
    return {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{database}",
        "SECRET_KEY": "benchmark-only-" + "x" * 40,
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "STATICFILES_MANIFEST": "false",
        "SESSION_COOKIE_SECURE": "false",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback
        "LOG_LEVEL": "WARNING",
        # The benchmarks measure what requests cost, not the limits on abuse: lifted here.
        "API_THROTTLE_USER": "1000000/min",
        "API_THROTTLE_PREVIEW": "1000000/min",
        "MAX_PENDING_JOBS_PER_USER": "1000000000",
        "MAX_PENDING_JOBS_PER_QUEUE": "1000000000",
    }


def database_create(name: str) -> None:
    database_drop(name)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", name], check=True)


def database_drop(name: str) -> None:
    subprocess.run(
        ["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", name],
        check=True,
    )


def django_setup(database: str, **extra: str) -> None:
    """Point this process at ``database`` and set Django up (call once, before any model
    import)."""
    sys.path.insert(0, str(ROOT))
    os.environ.update(django_env(database), **extra)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()


def migrate_and_apply_policy(tmp: Path) -> None:
    import io

    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    path = tmp / "policy.yaml"
    path.write_text(policy_yaml())
    call_command("apply_policy", str(path), stdout=io.StringIO())


def node_rows() -> list[Any]:
    """The node mirror of ``cluster_spec()`` as ``Node`` rows (unsaved)."""
    from django.utils import timezone

    from queues.models import GpuClass, Node

    classes = {g.name: g for g in GpuClass.objects.all()}
    product = {n: p for n, p, *_ in GPU_CLASSES}
    now = timezone.now()
    return [
        Node(
            name=name,
            gpu_class=classes[g],
            product=product[g],
            gpu_count=GPUS_PER_NODE,
            rack=f"{g}-rack-{(i % NODES_PER_CLASS) // 8:02d}",
            healthy=True,
            last_seen_at=now,
        )
        for i, (name, g) in enumerate(node_names())
    ]
