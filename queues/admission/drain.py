"""Free GPUs that no waiting shape can use, and the drain that would make room.

Fragmentation strands GPUs: 24 H100s free as three nodes with 8, 8 and 8 taken in part each
hold no 8-GPU pod. For every shape that waits (pods × whole GPUs of a pending job, per GPU
class it may run on) that does not fit now although enough GPUs are free in total, this finds
the node whose draining (no new work; its jobs end at their runtime limits) would let the shape
fit soonest. Placement is the engine's own (``state.place`` on the state a plan starts from),
so the advice never disagrees with what admission would do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from queues.admission.asks import build_asks
from queues.admission.snapshot import Snapshot
from queues.admission.state import EXCLUSIVE, Pool, Shape, State, place


@dataclass(frozen=True)
class DrainAdvice:
    """Jobs of one shape wait on ``gpu_class`` with ``free`` whole GPUs free on in-service
    nodes: draining ``node`` until ``ends_at`` (its jobs' runtime limits) makes room."""

    gpu_class: str
    free: int
    pods: int
    devices: int
    jobs: int
    node: str
    ends_at: datetime
    now: datetime

    @property
    def minutes(self) -> int:
        """How long the drain takes, in whole minutes (rounded up; at least 1)."""
        return max(1, math.ceil((self.ends_at - self.now) / timedelta(minutes=1)))


def _node_free_at(state: State, pool: Pool, local: int) -> datetime:
    """When every job holding devices of ``pool`` on local node ``local`` ends (its runtime
    limit, or its grace period's end when stopping); ``now`` when none does."""
    ends = [
        alloc.end
        for alloc in state.class_allocs.get(pool.gpu_class, {}).values()
        if any(spot.pool is pool and spot.local == local for spot in alloc.spots)
    ]
    return max(ends, default=state.now)


def drains_to_fit(snapshot: Snapshot) -> list[DrainAdvice]:
    """One advice per (GPU class, waiting shape) that fragmentation blocks, most jobs first.
    Only whole-GPU (exclusive) pools: MIG and time-sliced nodes have no gang slots."""
    state = State(snapshot)
    shapes: dict[tuple[str, int, int], tuple[int, Pool, Shape]] = {}
    for ask in build_asks(state):
        if ask.static:
            continue
        for gpu_class in ask.classes:
            pool = state.pools.get((gpu_class, ask.mode, ask.profile))
            if pool is None or pool.mode != EXCLUSIVE:
                continue
            shape = ask.shapes[gpu_class]
            if pool.free_devices < shape.pods * shape.devices or place(pool, shape) is not None:
                continue  # not enough free at all (not fragmentation), or it fits now
            key = (gpu_class, shape.pods, shape.devices)
            jobs = shapes[key][0] if key in shapes else 0
            shapes[key] = (jobs + 1, pool, shapes[key][2] if key in shapes else shape)
    advice: list[DrainAdvice] = []
    for (gpu_class, pods, devices), (jobs, pool, shape) in shapes.items():
        best: tuple[datetime, str] | None = None
        for local, eligible in enumerate(pool.eligible):
            if not eligible:
                continue
            view = list(pool.free)
            view[local] = pool.cap[local]
            if place(pool, shape, free=view) is None:
                continue
            candidate = (_node_free_at(state, pool, local), state.nodes[pool.nodes[local]].name)
            if best is None or candidate < best:
                best = candidate
        if best is not None:
            advice.append(
                DrainAdvice(
                    gpu_class=gpu_class,
                    free=pool.free_devices,
                    pods=pods,
                    devices=devices,
                    jobs=jobs,
                    node=best[1],
                    ends_at=best[0],
                    now=state.now,
                )
            )
    return sorted(advice, key=lambda a: (-a.jobs, a.gpu_class, -a.pods * a.devices))
