"""Queue terms, GPU and capability classes, teams and rate cards edited as text on the admin
side: exactly apply_policy's checks, the field named, audited; rate cards only added."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from auditlog.models import LogEntry

from queues.models import Queue, RateCard
from queues.operations.services import policy_object_apply, policy_object_text
from queues.policy.parse import PolicyError

pytestmark = pytest.mark.django_db


def batch_text(**replace):
    text = policy_object_text(section="queues", name="batch")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


def test_a_queue_term_is_checked_then_saved_and_audited(client, ada, example_policy):
    client.force_login(ada)
    text = batch_text(**{"max_runtime: 3d": "max_runtime: 4d"})

    checked = client.post("/manage/policy/queues/batch/", {"text": text, "check": "1"})
    assert checked.status_code == 200
    assert checked.context["report"].render() == (
        "~ queues batch: changed\n    max_runtime: 3d → 4d\nDry run: nothing was written."
    )
    assert Queue.objects.get(name="batch").max_runtime == timedelta(days=3)

    saved = client.post("/manage/policy/queues/batch/", {"text": text, "save": "1"})
    assert saved["Location"] == "/manage/policy/"
    batch = Queue.objects.get(name="batch")
    assert batch.max_runtime == timedelta(days=4)
    entry = LogEntry.objects.get_for_object(batch).latest("timestamp")
    assert (entry.actor, entry.additional_data, entry.changes_dict) == (
        ada,
        {"source": "page"},
        {"max_runtime": ["3 days, 0:00:00", "4 days, 0:00:00"]},
    )


def test_a_bad_term_is_refused_naming_the_field(client, ada, example_policy):
    client.force_login(ada)
    text = batch_text(**{"max_runtime: 3d": "max_runtime: forever"})

    response = client.post("/manage/policy/queues/batch/", {"text": text, "save": "1"})

    assert response.status_code == 422
    assert response.context["problems"] == [
        "queues[batch].max_runtime: 'forever' is not a duration like '4h', '30m' or '1h30m'"
    ]
    assert Queue.objects.get(name="batch").max_runtime == timedelta(days=3)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "queues: [",
            "yaml: syntax error at line 1, column 10: expected the node content, but found '<stream end>'",
        ),
        ("teams: []", "queues[batch]: give exactly one section, queues"),
        ("queues: []", "queues[batch]: give exactly one entry"),
    ],
)
def test_malformed_text_is_refused(text, problem, example_policy):
    with pytest.raises(PolicyError) as refused:
        policy_object_apply(section="queues", name="batch", text=text, dry_run=False)
    assert str(refused.value) == problem


def test_an_edit_may_not_rename(example_policy):
    text = batch_text(**{"name: batch": "name: batch2"})
    with pytest.raises(PolicyError) as refused:
        policy_object_apply(section="queues", name="batch", text=text, dry_run=False)
    assert str(refused.value) == "queues[batch].name: must stay batch; to rename, create a new one"


def test_a_new_rate_card_is_added_and_one_in_force_is_never_rewritten(client, ada, example_policy):
    client.force_login(ada)
    cards = RateCard.objects.count()
    text = (
        "rate_cards:\n  - effective_from: 2031-01-01T00:00:00Z\n    currency: EUR\n"
        "    price_per_normalized_gpu_hour: 3\n"
        "    weights: {h100-80gb: 4, a100-80gb: 2.5, l4: 1, t4: 0.5}\n"
    )
    response = client.post("/manage/policy/rate_cards/new", {"text": text, "save": "1"})
    assert response.status_code == 302
    assert RateCard.objects.count() == cards + 1

    response = client.post(
        "/manage/policy/rate_cards/new", {"text": text.replace(": 3\n", ": 4\n"), "save": "1"}
    )
    assert response.status_code == 422
    assert response.context["problems"] == [
        "rate_cards[2031-01-01T00:00:00Z]: rate cards are never rewritten "
        "(price_per_normalized_gpu_hour 3 → 4); add a new card with a later effective_from instead"
    ]
    assert client.get("/manage/policy/rate_cards/2031-01-01T00:00:00Z/").status_code == 404


def test_the_policy_exports_as_a_file_apply_policy_reads(client, ada, example_policy):
    client.force_login(ada)
    response = client.get("/manage/policy/export")
    assert response["Content-Disposition"] == 'attachment; filename="policy.yaml"'
    from queues.policy.export import dump_policy, policy_current

    assert response.content.decode() == dump_policy(policy_current())


def test_the_policy_overview_titles_its_sections_and_dates_rate_cards(client, ada, example_policy):
    # It showed "Gpuclasses", "Capabilityclasses", "Ratecards" and a rate card's raw ISO date.
    client.force_login(ada)
    html = client.get("/manage/policy/").content.decode()

    titles = re.findall(r'<article class="card" id="section-[a-z_]+">\s*<h2>([^<]+)</h2>', html)
    assert titles == [
        "GPU classes",
        "Capability classes",
        "Queues",
        "Teams",
        "Node pools",
        "Rate cards",
        "Roles from identity-provider groups",
    ]
    assert "<li>from 2026-01-01 00:00 UTC <small>(never rewritten)</small></li>" in html


def test_a_node_pool_is_edited_on_the_page_like_any_policy_object(client, ada, example_policy):
    # Node pools are policy (docs/policy.md) but had no place on the admin's policy page.
    from queues.models import NodePool
    from queues.policy.apply import policy_apply
    from tests.conftest import ROOT

    policy_apply(text=(ROOT / "examples" / "policy-elastic.yaml").read_text())
    client.force_login(ada)
    assert (
        'href="/manage/policy/node_pools/h100-burst/"'
        in client.get("/manage/policy/").content.decode()
    )
    text = policy_object_text(section="node_pools", name="h100-burst")
    assert "max_nodes: 2" in text

    saved = client.post(
        "/manage/policy/node_pools/h100-burst/",
        {"text": text.replace("max_nodes: 2", "max_nodes: 3"), "save": "1"},
    )

    assert saved["Location"] == "/manage/policy/"
    assert NodePool.objects.get(name="h100-burst").max_nodes == 3
    refused = client.post(
        "/manage/policy/node_pools/h100-burst/",
        {"text": text.replace("max_nodes: 2", "max_nodes: -1"), "save": "1"},
    )
    assert refused.status_code == 422
    assert any(
        p.startswith("node_pools[h100-burst].max_nodes") for p in refused.context["problems"]
    )


def test_roles_text_over_the_limit_is_refused_whole_not_cut(client, ada, example_policy):
    client.force_login(ada)
    text = "roles:\n  admin: [gpu-admins]\n" + "#" * 1_100_000 + "\n"

    response = client.post("/manage/policy/roles/", {"text": text, "save": "1"})

    assert response.status_code == 422
    [problem] = response.context["problems"]
    assert problem == "yaml: the file is 1,100,030 bytes; at most 1,000,000"
