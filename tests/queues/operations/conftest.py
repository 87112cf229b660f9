from __future__ import annotations

import pytest

from queues.models import GpuClass, Node


@pytest.fixture
def h100_nodes(example_policy):
    """Five healthy H100 nodes of 8 GPUs (40 GPUs), as the example cluster has them."""
    h100 = GpuClass.objects.get(name="h100-80gb")
    return [
        Node.objects.create(
            name=f"h100-0{i}",
            gpu_class=h100,
            product=h100.product,
            gpu_count=8,
            rack="rack-1" if i <= 3 else "rack-2",
            network_domain="ib-a",
        )
        for i in range(1, 6)
    ]
