"""Shared fixtures: the example policy applied, and the personas of docs/concepts.md.

Personas (after ``example_policy``): ``mia`` is a member of vision and nlp; ``sara`` of search
only; ``outsider`` of no team; ``fiona`` is finance; ``ada`` is an admin.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from hypothesis import settings
from rest_framework.test import APIClient

from portal.models import ApiToken
from portal.roles import FINANCE_GROUP
from queues.policy.apply import policy_apply
from tests.sim import sim_cluster, sim_cluster_factory  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"

# ``--hypothesis-profile=slow`` (``make test-slow``): every property at least 2,000 examples,
# outside CI's time budget. The normal run keeps hypothesis' defaults, and the admission
# properties their 200 (tests/queues/admission/strategies.py).
settings.register_profile("slow", max_examples=2000, deadline=None)
# ``--hypothesis-profile=ci`` (.ci/run): the same examples every run, so a merge is judged on its
# own changes; new examples are explored by local runs and ``make test-slow``. (The same given
# the same modules loaded before: hypothesis mixes literal constants of the project's loaded
# modules into its draws; tests/queues/admission/shares.py.)
settings.register_profile("ci", derandomize=True, database=None)


@pytest.fixture(autouse=True)
def empty_cache():
    """Login lock-outs and API throttles count in the cache: each test starts from none."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def example_policy(db):
    return policy_apply(text=EXAMPLE_POLICY.read_text())


@pytest.fixture
def mia(example_policy):
    return get_user_model().objects.get(username="mia")


@pytest.fixture
def sara(example_policy):
    return get_user_model().objects.get(username="sara")


@pytest.fixture
def outsider(db):
    return get_user_model().objects.create_user("outsider", password="pw-for-tests")


@pytest.fixture
def fiona(db):
    user = get_user_model().objects.create_user("fiona", password="pw-for-tests")
    user.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])
    return user


@pytest.fixture
def ada(db):
    return get_user_model().objects.create_user("ada", password="pw-for-tests", is_staff=True)


@pytest.fixture
def api():
    return APIClient()


@pytest.fixture
def api_as():
    """An API client authenticated with a personal token of the given user (as scripts call it)."""

    def make(user):
        _, key = ApiToken.issue(user=user, name=f"tests-{ApiToken.objects.count()}")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client

    return make
