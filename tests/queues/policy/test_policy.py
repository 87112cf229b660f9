"""apply_policy / export_policy: policy as code, all or nothing."""

from __future__ import annotations

import copy
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from queues.models import (
    CapabilityClass,
    FairShareSettings,
    GpuClass,
    Queue,
    Quota,
    RateCard,
    Reservation,
    Team,
)
from queues.policy.apply import policy_apply
from queues.policy.export import dump_policy, policy_current
from queues.policy.parse import PolicyError
from queues.policy.text import policy_yaml
from tests.conftest import EXAMPLE_POLICY
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


def example() -> dict:
    return yaml.safe_load(EXAMPLE_POLICY.read_text())


def text_of(data: dict) -> str:
    return policy_yaml(data)


def entry(data: dict, section: str, name: str) -> dict:
    return next(e for e in data[section] if e["name"] == name)


def rejected(data: dict | str) -> list[str]:
    """Apply and expect a rejection; returns the problems as printed."""
    with pytest.raises(PolicyError) as excinfo:
        policy_apply(text=data if isinstance(data, str) else text_of(data))
    return [str(p) for p in excinfo.value.problems]


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


class TestApply:
    def test_it_creates_everything_the_file_names(self):
        report = policy_apply(text=EXAMPLE_POLICY.read_text())

        assert report.changed
        assert sorted(GpuClass.objects.values_list("name", flat=True)) == [
            "a100-80gb",
            "h100-80gb",
            "l4",
            "t4",
        ]
        assert CapabilityClass.objects.count() == 8
        assert Team.objects.count() == 5
        assert Queue.objects.count() == 5
        assert Reservation.objects.count() == 3
        assert FairShareSettings.objects.get().usage_half_life == timedelta(days=7)
        nlp_h100 = Quota.objects.get(team__name="nlp", gpu_class__name="h100-80gb")
        assert (nlp_h100.nominal, nlp_h100.borrowing_limit) == (Decimal(8), Decimal(16))
        batch = Queue.objects.get(name="batch")
        assert batch.preemption_class == "preemptible"
        assert batch.checkpoint_interval == timedelta(minutes=30)
        assert batch.max_runtime == timedelta(days=3)
        assert (batch.min_job_priority, batch.default_job_priority, batch.max_job_priority) == (
            0,
            5,
            10,
        )
        assert sorted(batch.allowed_gpu_classes.values_list("name", flat=True)) == [
            "a100-80gb",
            "h100-80gb",
            "l4",
            "t4",
        ]
        card = RateCard.objects.get()
        assert card.currency == "EUR"
        assert card.price_per_normalized_gpu_hour == Decimal("1.20")
        assert {w.gpu_class.name: w.weight for w in card.weights.all()} == {
            "h100-80gb": Decimal(4),
            "a100-80gb": Decimal("2.5"),
            "l4": Decimal(1),
            "t4": Decimal("0.5"),
        }

    def test_it_creates_missing_members_without_a_usable_password_and_lists_them(self):
        get_user_model().objects.create_user("mia", password="kept-secret")

        report = policy_apply(text=EXAMPLE_POLICY.read_text())

        assert "mia" not in report.users_created
        assert "noah" in report.users_created
        assert not get_user_model().objects.get(username="noah").has_usable_password()
        assert get_user_model().objects.get(username="mia").check_password("kept-secret")
        assert "users created without a usable password: " in report.render()
        assert sorted(
            Team.objects.get(name="vision").members.values_list("username", flat=True)
        ) == [
            "mia",
            "vera",
            "victor",
        ]

    def test_applying_the_same_file_twice_changes_nothing_and_says_so(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        before = policy_current()

        output = run("apply_policy", str(EXAMPLE_POLICY))

        assert output.strip() == "No changes: the database already matches the file."
        assert policy_current() == before

    def test_a_changed_value_is_reported_old_to_new(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        data = example()
        entry(data, "teams", "nlp")["quotas"]["h100-80gb"]["nominal"] = 4
        entry(data, "queues", "training")["expected_wait_target"] = "3h"
        entry(data, "queues", "training")["teams"] = ["nlp", "vision"]

        report = policy_apply(text=text_of(data))

        assert report.render().splitlines() == [
            "~ teams nlp: changed",
            "    quotas.h100-80gb.nominal: 8 → 4",
            "~ queues training: changed",
            "    expected_wait_target: 4h → 3h",
            "    teams: [nlp, research, vision] → [nlp, vision]",
        ]
        assert Queue.objects.get(name="training").teams.count() == 2

    def test_dry_run_prints_the_diff_and_writes_nothing(self, tmp_path):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        data = example()
        entry(data, "gpu_classes", "l4")["hbm_gb"] = 48
        data["queues"].append({**entry(data, "queues", "batch"), "name": "batch-2"})
        del data["reservations"][2]
        path = tmp_path / "policy.yaml"
        path.write_text(text_of(data))
        before = policy_current()

        output = run("apply_policy", str(path), "--dry-run")

        assert output.splitlines() == [
            "~ gpu_classes l4: changed",
            "    hbm_gb: 24 → 48",
            "+ queues batch-2: created",
            "? reservations nlp-conference-run: not in file (left alone; --prune removes it)",
            "Dry run: nothing was written.",
        ]
        assert policy_current() == before
        assert not Queue.objects.filter(name="batch-2").exists()

    def test_dry_run_of_a_fresh_database_creates_no_users(self):
        output = run("apply_policy", str(EXAMPLE_POLICY), "--dry-run")

        assert "+ queues batch: created" in output
        assert get_user_model().objects.count() == 0
        assert Queue.objects.count() == 0

    def test_objects_not_in_the_file_are_listed_and_left_alone(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        data = example()
        data["queues"] = [q for q in data["queues"] if q["name"] != "interactive-mig"]

        report = policy_apply(text=text_of(data))

        assert (
            "? queues interactive-mig: not in file (left alone; --prune removes it)"
            in report.render()
        )
        assert Queue.objects.get(name="interactive-mig").active

    def test_prune_removes_unreferenced_objects(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        data = example()
        data["queues"] = [q for q in data["queues"] if q["name"] != "interactive-mig"]

        report = policy_apply(text=text_of(data), prune=True)

        assert "- queues interactive-mig: removed" in report.render()
        assert not Queue.objects.filter(name="interactive-mig").exists()

    def test_prune_deactivates_what_jobs_still_reference_and_reports_it(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        queue = Queue.objects.get(name="interactive-mig")
        team = Team.objects.get(name="vision")
        JobFactory(
            queue=queue, team=team, capability_class=CapabilityClass.objects.get(name="mig-1g.10gb")
        )
        JobFactory(
            queue=queue, team=team, capability_class=CapabilityClass.objects.get(name="mig-1g.10gb")
        )
        data = example()
        data["queues"] = [q for q in data["queues"] if q["name"] != "interactive-mig"]

        report = policy_apply(text=text_of(data), prune=True)

        assert (
            "- queues interactive-mig: deactivated (still referenced by 2 jobs)" in report.render()
        )
        queue.refresh_from_db()
        assert not queue.active
        assert queue.jobs.count() == 2
        # Naming it again brings it back.
        again = policy_apply(text=EXAMPLE_POLICY.read_text())
        assert "~ queues interactive-mig: reactivated" in again.render()
        queue.refresh_from_db()
        assert queue.active

    def test_prune_keeps_reservations_teams_depend_on_by_deactivating_the_team(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        data = example()
        data["teams"] = [t for t in data["teams"] if t["name"] != "search"]
        data["reservations"] = [r for r in data["reservations"] if r["team"] != "search"]
        for queue in data["queues"]:
            queue["teams"] = [t for t in queue["teams"] if t != "search"]
        del data["budgets"]["cost_centers"]  # search's: no team would have it
        JobFactory(
            team=Team.objects.get(name="search"),
            reservation=Reservation.objects.get(name="search-inference"),
        )

        report = policy_apply(text=text_of(data), prune=True).render()

        assert "- reservations search-inference: deactivated (still referenced by 1 job)" in report
        assert "- teams search: deactivated (still referenced by 1 job, 1 reservation)" in report

    def test_rate_cards_are_never_removed_even_with_prune(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        data = example()
        data["rate_cards"].append(
            {
                **data["rate_cards"][0],
                "effective_from": "2027-01-01T00:00:00Z",
                "price_per_normalized_gpu_hour": 1.5,
            }
        )
        data["rate_cards"].pop(0)

        report = policy_apply(text=text_of(data), prune=True).render()

        assert "+ rate_cards 2027-01-01T00:00:00Z: created" in report
        assert (
            "? rate_cards 2026-01-01T00:00:00Z: not in file (rate cards are never removed)"
            in report
        )
        assert RateCard.objects.count() == 2


class TestExport:
    def test_export_then_apply_changes_nothing(self, tmp_path):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        exported = tmp_path / "exported.yaml"

        call_command("export_policy", "--output", str(exported), stderr=StringIO())

        assert run("apply_policy", str(exported)).strip() == (
            "No changes: the database already matches the file."
        )

    def test_an_exported_policy_builds_the_same_database_from_scratch(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        before = policy_current()
        exported = run("export_policy")
        for model in (Reservation, Queue, Quota, Team, CapabilityClass):
            model.objects.all().delete()

        policy_apply(text=exported)

        assert policy_current() == before

    def test_fractions_and_durations_survive_the_round_trip(self):
        data = example()
        entry(data, "teams", "speech")["quotas"]["a100-80gb"] = {
            "nominal": "3/7",
            "borrowing_limit": 0.5,
        }
        entry(data, "queues", "batch")["max_runtime"] = "2d12h"
        policy_apply(text=text_of(data))

        exported = dump_policy(policy_current())

        assert "max_runtime: 2d12h" in exported
        assert Quota.objects.get(
            team__name="speech", gpu_class__name="a100-80gb"
        ).nominal == Decimal("0.429")
        assert "No changes" in policy_apply(text=exported).render()


class TestValidation:
    """Every invalid file is rejected whole, naming the entry, the field and what is wrong."""

    def assert_nothing_written(self):
        assert GpuClass.objects.count() == 0
        assert Team.objects.count() == 0
        assert get_user_model().objects.count() == 0

    def test_a_quota_on_an_unknown_gpu_class(self):
        data = example()
        entry(data, "teams", "vision")["quotas"]["v100"] = {"nominal": 2}

        assert rejected(data) == ["teams[vision].quotas.v100: unknown GPU class 'v100'"]
        self.assert_nothing_written()

    def test_negative_gpus(self):
        data = example()
        entry(data, "teams", "nlp")["quotas"]["h100-80gb"]["nominal"] = -2

        assert rejected(data) == [
            "teams[nlp].quotas.h100-80gb.nominal: must not be negative (got -2)"
        ]
        self.assert_nothing_written()

    def test_a_preemptible_queue_without_a_checkpoint_interval(self):
        data = example()
        del entry(data, "queues", "batch")["checkpoint_interval"]

        assert rejected(data) == [
            "queues[batch].checkpoint_interval: required: a preemptible queue's jobs are "
            "preempted, so they must checkpoint"
        ]
        self.assert_nothing_written()

    def test_a_graceful_queue_needs_a_grace_period(self):
        data = example()
        del entry(data, "queues", "training")["grace_period"]

        assert rejected(data) == [
            "queues[training].grace_period: required for the graceful preemption class"
        ]

    def test_duplicate_names(self):
        data = example()
        data["queues"].append(copy.deepcopy(entry(data, "queues", "batch")))

        assert rejected(data) == ["queues[batch].name: duplicate name (entries #3 and #6)"]
        self.assert_nothing_written()

    def test_a_yaml_syntax_error_names_its_line(self):
        text = EXAMPLE_POLICY.read_text().replace("  - name: l4\n", "  - name: l4\n   bad: [\n", 1)
        line = text.splitlines().index("   bad: [") + 1

        problems = rejected(text)

        assert len(problems) == 1
        assert problems[0].startswith(f"yaml: syntax error at line {line}, column 4: ")

    def test_the_command_reports_every_problem_and_exits_non_zero(self, tmp_path):
        data = example()
        entry(data, "queues", "interactive")["max_runtime"] = "forever"
        entry(data, "queues", "interactive")["default_runtime"] = "8h"
        entry(data, "capability_classes", "fp8")["precisions"] = ["fp4"]
        path = tmp_path / "bad.yaml"
        path.write_text(text_of(data))

        with pytest.raises(CommandError) as excinfo:
            call_command("apply_policy", str(path), stdout=StringIO())

        message = str(excinfo.value)
        assert "was rejected, nothing was written (2 problem(s))" in message
        assert "capability_classes[fp8].precisions: unknown precision fp4" in message
        assert (
            "queues[interactive].max_runtime: 'forever' is not a duration like '4h', '30m' or '1h30m'"
            in message
        )
        self.assert_nothing_written()

    def test_default_runtime_over_the_maximum(self):
        data = example()
        entry(data, "queues", "interactive")["default_runtime"] = "8h"

        assert rejected(data) == [
            "queues[interactive].default_runtime: 8h is longer than max_runtime 4h"
        ]

    def test_a_never_preempted_queue_may_not_borrow(self):
        data = example()
        entry(data, "queues", "interactive")["may_borrow"] = True

        assert rejected(data) == [
            "queues[interactive].may_borrow: only graceful or preemptible queues may borrow: "
            "lenders reclaim borrowed GPUs by preempting"
        ]

    def test_unknown_references_in_a_queue(self):
        data = example()
        entry(data, "queues", "batch")["allowed_gpu_classes"].append("v100")
        entry(data, "queues", "batch")["teams"].append("marketing")

        assert rejected(data) == [
            "queues[batch].allowed_gpu_classes: unknown GPU class 'v100'",
            "queues[batch].teams: unknown team 'marketing'",
        ]

    def test_a_mig_capability_class_on_a_queue_that_does_not_share_by_mig(self):
        data = example()
        entry(data, "queues", "batch")["allowed_capability_classes"].append("mig-1g.10gb")

        assert rejected(data) == [
            "queues[batch].allowed_capability_classes: capability class mig-1g.10gb asks for "
            "MIG profile 1g.10gb, but the queue's sharing mode is exclusive"
        ]

    def test_a_capability_class_that_matches_none_of_the_queues_gpus(self):
        data = example()
        entry(data, "queues", "inference")["allowed_capability_classes"].append("min-40gb")

        assert rejected(data) == [
            "queues[inference].allowed_capability_classes: capability class min-40gb matches "
            "none of the queue's GPU classes (l4: HBM 24 GB < 40 GB required)"
        ]

    def test_unknown_fields_and_sections_are_typos_not_silence(self):
        data = example()
        entry(data, "queues", "batch")["max_runtme"] = "1d"
        data["queus"] = []

        problems = rejected(data)

        assert problems[0] == (
            "queus: unknown section (expected: fair_share, submissions, gpu_classes, "
            "capability_classes, teams, queues, reservations, node_pools, rate_cards, budgets, roles)"
        )
        assert problems[1].startswith("queues[batch].max_runtme: unknown field (expected one of: ")

    def test_a_reservation_must_end_after_it_starts(self):
        data = example()
        entry(data, "reservations", "nlp-conference-run")["ends_at"] = "2027-01-10T08:00:00Z"

        assert rejected(data) == [
            "reservations[nlp-conference-run].ends_at: 2027-01-10T08:00:00Z is not after "
            "starts_at 2027-01-11T08:00:00Z"
        ]

    def test_a_reservation_window_needs_both_ends(self):
        data = example()
        del entry(data, "reservations", "nlp-conference-run")["ends_at"]

        assert rejected(data) == [
            "reservations[nlp-conference-run].ends_at: a window needs both starts_at and ends_at "
            "(leave both out for a standing reservation)"
        ]

    def test_a_reservation_for_a_queue_its_team_may_not_use(self):
        data = example()
        entry(data, "reservations", "search-inference")["queue"] = "training"
        entry(data, "reservations", "search-inference")["gpu_class"] = "h100-80gb"

        assert rejected(data) == [
            "reservations[search-inference].queue: team search may not submit to queue training"
        ]

    def test_a_timestamp_without_a_time_zone(self):
        data = example()
        entry(data, "reservations", "nlp-conference-run")["starts_at"] = "2027-01-11T08:00:00"

        assert rejected(data) == [
            "reservations[nlp-conference-run].starts_at: 2027-01-11T08:00:00 has no time zone; "
            "add one, e.g. 'Z' for UTC"
        ]

    def test_duplicate_namespaces(self):
        data = example()
        entry(data, "teams", "nlp")["namespace"] = "team-vision"

        assert rejected(data) == [
            "teams[nlp].namespace: 'team-vision' is already the namespace of team vision"
        ]

    def test_the_newest_rate_card_must_weigh_every_gpu_class(self):
        data = example()
        del data["rate_cards"][0]["weights"]["t4"]

        assert rejected(data) == [
            "rate_cards[2026-01-01T00:00:00Z].weights: the newest rate card must weigh every "
            "GPU class; missing: t4"
        ]

    def test_a_stored_rate_card_is_never_rewritten(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        data = example()
        data["rate_cards"][0]["price_per_normalized_gpu_hour"] = 2

        assert rejected(data) == [
            "rate_cards[2026-01-01T00:00:00Z]: rate cards are never rewritten "
            "(price_per_normalized_gpu_hour 1.2 → 2); add a new card with a later effective_from "
            "instead"
        ]
        assert RateCard.objects.get().price_per_normalized_gpu_hour == Decimal("1.20")


class TestCapacity:
    """Quotas plus reservations may not promise more of a GPU class than the cluster has."""

    def test_a_file_that_over_promises_is_refused_with_the_numbers(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        h100 = GpuClass.objects.get(name="h100-80gb")
        NodeFactory(name="h100-a", gpu_class=h100, gpu_count=8)
        NodeFactory(name="h100-b", gpu_class=h100, gpu_count=8)
        NodeFactory(name="h100-c", gpu_class=h100, gpu_count=8, healthy=False)
        data = example()

        # vision 8 + nlp 8 + research 4 = 20 nominal, plus the 8-GPU conference window.
        assert rejected(data) == [
            "gpu_classes[h100-80gb]: quotas (20) plus reservations (8 at 2027-01-11T08:00:00Z) "
            "promise 28 GPUs, but the cluster has 16 on 2 healthy node(s)"
        ]

    def test_overlapping_windows_count_together_and_adjacent_ones_do_not(self):
        policy_apply(text=EXAMPLE_POLICY.read_text())
        l4 = GpuClass.objects.get(name="l4")
        NodeFactory(name="l4-a", gpu_class=l4, gpu_count=16)
        data = example()
        # Nominal l4: vision 2 + speech 4 + search 2 = 8; standing reservations 4 + 2 = 6.
        window = {"team": "speech", "queue": "inference", "gpu_class": "l4", "amount": 2}
        data["reservations"] += [
            {
                "name": "w1",
                **window,
                "starts_at": "2027-02-01T00:00:00Z",
                "ends_at": "2027-02-02T00:00:00Z",
            },
            {
                "name": "w2",
                **window,
                "starts_at": "2027-02-02T00:00:00Z",
                "ends_at": "2027-02-03T00:00:00Z",
            },
        ]
        policy_apply(text=text_of(data))  # 8 + 6 + 2 = 16: fits exactly

        data["reservations"][-1]["starts_at"] = "2027-02-01T12:00:00Z"

        assert rejected(data) == [
            "gpu_classes[l4]: quotas (8) plus reservations (10 at 2027-02-01T12:00:00Z) "
            "promise 18 GPUs, but the cluster has 16 on 1 healthy node(s)"
        ]

    def test_an_unknown_capacity_is_not_checked(self):
        # No node of any class is mirrored yet: nothing to compare with.
        assert policy_apply(text=EXAMPLE_POLICY.read_text()).changed


class TestNamesAreMatchedWhole:
    """A pattern checked with ``re.match`` and ``$`` lets a trailing newline through."""

    def test_a_member_name_ending_in_a_newline_is_refused(self):
        data = example()
        entry(data, "teams", "vision")["members"] = ["mia\n"]

        assert rejected(data) == ["teams[vision].members: not a valid username: mia\n"]
        assert not get_user_model().objects.filter(username="mia\n").exists()

    def test_a_team_name_ending_in_a_newline_is_refused(self):
        data = example()
        entry(data, "teams", "vision")["name"] = "vision\n"

        assert rejected(data)[0].startswith("teams[#1].name: 'vision\\n' is not a valid name")
        assert not Team.objects.exists()


def test_a_cost_center_change_is_recorded_as_history(example_policy):
    from queues.models import Team, TeamCostCenter

    text = EXAMPLE_POLICY.read_text().replace("cost_center: CC-1001", "cost_center: CC-7777")
    policy_apply(text=text)
    policy_apply(text=text)  # unchanged: nothing more recorded

    vision = Team.objects.get(name="vision")
    assert list(
        TeamCostCenter.objects.filter(team=vision)
        .order_by("effective_from")
        .values_list("cost_center", flat=True)
    ) == ["CC-1001", "CC-7777"]
    assert TeamCostCenter.objects.filter(team__name="nlp").count() == 1
