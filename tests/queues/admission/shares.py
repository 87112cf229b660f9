"""How often each kind of decision happens over the examples ``snapshots()`` draws with one seed:
``python -m tests.queues.admission.shares SEED EXAMPLES`` prints the count of examples and of
each kind (``strategies.EVENT_KINDS``) as JSON.

It runs in a fresh interpreter (``test_the_strategies_reach_every_hard_case…`` starts it) because
hypothesis' draws with a fixed seed depend on more than the seed: about one integer draw in
twenty is replaced by a literal constant collected from the source of every project module
imported so far, so the examples of one seed change with whatever ran before in the same
process. Measured over seed 1: MIG admissions in 6.1 % of examples with only the engine loaded,
2.9 % after importing the rest of the portal. This module imports only the engine and the
strategies, so the same seed gives the same examples every run.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from hypothesis import HealthCheck, Phase, given, seed, settings

from queues.admission import Snapshot, plan
from tests.queues.admission.strategies import EVENT_KINDS, plan_events, snapshots


def shares_count(seed_value: int, examples: int) -> dict[str, int]:
    """``examples``: how many examples ran; each kind: in how many of them it happened."""
    seen: Counter[str] = Counter()
    ran = [0]

    @seed(seed_value)
    @given(snapshots())
    @settings(
        max_examples=examples,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def count(snapshot: Snapshot) -> None:
        ran[0] += 1
        seen.update(plan_events(snapshot, plan(snapshot)))

    count()
    return {"examples": ran[0], **{kind: seen[kind] for kind in EVENT_KINDS}}


if __name__ == "__main__":
    print(json.dumps(shares_count(int(sys.argv[1]), int(sys.argv[2]))))
