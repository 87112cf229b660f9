"""The lease that keeps reconciles one at a time."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queues.models import Lease
from queues.reconcile.leases import lease_acquire, lease_release

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


def test_the_first_taker_wins_and_others_wait_until_it_expires():
    assert lease_acquire(name="reconcile", holder="worker-a", ttl=MINUTE)
    assert not lease_acquire(name="reconcile", holder="worker-b", ttl=MINUTE)

    Lease.objects.filter(name="reconcile").update(expires_at=timezone.now() - timedelta(seconds=1))

    assert lease_acquire(name="reconcile", holder="worker-b", ttl=MINUTE)
    assert Lease.objects.get(name="reconcile").holder == "worker-b"


def test_the_holder_renews_its_own_lease():
    lease_acquire(name="reconcile", holder="worker-a", ttl=MINUTE)
    first = Lease.objects.get().expires_at

    assert lease_acquire(name="reconcile", holder="worker-a", ttl=10 * MINUTE)
    assert Lease.objects.get().expires_at > first


def test_releasing_lets_the_next_holder_in_at_once_but_only_the_holder_can_release():
    lease_acquire(name="reconcile", holder="worker-a", ttl=MINUTE)

    lease_release(name="reconcile", holder="worker-b")
    assert not lease_acquire(name="reconcile", holder="worker-b", ttl=MINUTE)

    lease_release(name="reconcile", holder="worker-a")
    assert lease_acquire(name="reconcile", holder="worker-b", ttl=MINUTE)


def test_leases_are_independent_by_name():
    assert lease_acquire(name="reconcile", holder="worker-a", ttl=MINUTE)
    assert lease_acquire(name="usage-rollup", holder="worker-b", ttl=MINUTE)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("expired", [False, True], ids=["new lease", "expired lease"])
def test_of_many_takers_at_once_exactly_one_wins(expired):
    if expired:
        Lease.objects.create(
            name="reconcile", holder="dead", expires_at=timezone.now() - timedelta(seconds=1)
        )
    start = threading.Barrier(8)
    won: list[str] = []

    def take(holder: str) -> None:
        try:
            start.wait()
            if lease_acquire(name="reconcile", holder=holder, ttl=MINUTE):
                won.append(holder)
        finally:
            connection.close()

    takers = [threading.Thread(target=take, args=(f"worker-{i}",)) for i in range(8)]
    for t in takers:
        t.start()
    for t in takers:
        t.join()

    assert len(won) == 1
    assert Lease.objects.get(name="reconcile").holder == won[0]


def test_two_reconcile_runs_in_one_worker_process_never_share_the_lease():
    # The demo's worker (solo pool) runs a countdown task from Celery's timer thread while the
    # main thread runs another: one process, two cycles at once. Each run is its own holder.
    from queues.reconcile.tasks import cycle_holder

    first, second = cycle_holder(), cycle_holder()

    assert first != second
    assert lease_acquire(name="reconcile", holder=first, ttl=MINUTE)
    assert not lease_acquire(name="reconcile", holder=second, ttl=MINUTE)


def test_the_reconcile_task_retries_a_lost_database_with_backoff_and_nothing_else():
    from django.db import InterfaceError, OperationalError

    from queues.reconcile.tasks import reconcile

    assert reconcile.name == "queues.reconcile"
    assert reconcile.acks_late is True
    assert set(reconcile.autoretry_for) == {OperationalError, InterfaceError}
    assert (reconcile.max_retries, reconcile.retry_backoff, reconcile.retry_backoff_max) == (
        3,
        2,
        60,
    )
