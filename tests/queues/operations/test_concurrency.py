"""Two admins raising quotas at the same moment: each edit fits alone, both together would
over-commit the class. Exactly one is saved, the other is refused with the numbers."""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection

from queues.models import GpuClass, Node, Quota
from queues.operations.services import quota_update
from queues.policy.apply import policy_apply
from queues.policy.parse import PolicyError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.django_db(transaction=True)
def test_two_simultaneous_quota_raises_never_over_commit():
    policy_apply(text=(ROOT / "examples" / "policy.yaml").read_text())
    h100 = GpuClass.objects.get(name="h100-80gb")
    for i in range(1, 6):
        Node.objects.create(name=f"h100-0{i}", gpu_class=h100, product=h100.product, gpu_count=8)
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def raise_quota(team: str, nominal: int) -> None:
        try:
            barrier.wait()
            quota_update(
                team=team,
                gpu_class="h100-80gb",
                nominal=Decimal(nominal),
                borrowing_limit=Decimal(8),
            )
            outcomes[team] = "saved"
        except PolicyError as exc:
            outcomes[team] = str(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=raise_quota, args=("vision", 16)),
        threading.Thread(target=raise_quota, args=("research", 12)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes.values())[-1] == "saved"
    refused = sorted(outcomes.values())[0]
    assert "promise 44 GPUs, but the cluster has 40 on 5 healthy node(s)" in refused
    nominal = sum(q.nominal for q in Quota.objects.filter(gpu_class=h100))
    assert nominal in (Decimal(28), Decimal(32))  # 20 + 8 or 20 + 12, never both
