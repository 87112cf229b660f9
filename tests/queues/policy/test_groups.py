"""Identity-provider groups in the policy: teams' ``groups`` and the ``roles`` section parse,
validate (naming the field), apply, export and round-trip; a login's groups give and take teams
and roles (``user_groups_apply``) without ever touching what the policy lists or an admin gave
by hand, and a policy apply never removes whom a group gave a team."""

from __future__ import annotations

import pytest
import yaml
from auditlog.models import LogEntry
from django.contrib.auth import get_user_model

from portal.roles import FINANCE, role_held, role_set
from queues.models import JobState, RoleGrant, RoleGroups, Team, TeamMembership
from queues.policy.apply import policy_apply
from queues.policy.export import dump_policy, policy_current
from queues.policy.groups import user_groups_apply
from queues.policy.parse import PolicyError
from queues.policy.text import policy_yaml
from tests.conftest import EXAMPLE_POLICY
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

VIA = "OpenID Connect https://idp.example.org"


def example() -> dict:
    return yaml.safe_load(EXAMPLE_POLICY.read_text())


def rejected(data: dict) -> list[str]:
    with pytest.raises(PolicyError) as excinfo:
        policy_apply(text=policy_yaml(data))
    return [str(p) for p in excinfo.value.problems]


def teams_for(username: str) -> list[str]:
    return sorted(Team.objects.filter(members__username=username).values_list("name", flat=True))


def log_in(username: str, *groups: str):
    user, _ = get_user_model().objects.get_or_create(username=username)
    return user_groups_apply(user=user, groups=frozenset(groups), via=VIA)


class TestThePolicyFile:
    def test_it_stores_the_teams_groups_and_the_roles(self, example_policy):
        assert Team.objects.get(name="nlp").groups == ["gpu-nlp"]
        assert {r.role: r.groups for r in RoleGroups.objects.all()} == {
            "finance": ["finance-gpu"],
            "admin": ["gpu-admins"],
        }

    def test_export_writes_them_as_the_file_does_and_applying_it_back_changes_nothing(
        self, example_policy
    ):
        exported = yaml.safe_load(dump_policy(policy_current()))

        assert exported["roles"] == {
            "finance": {"groups": ["finance-gpu"]},
            "admin": {"groups": ["gpu-admins"]},
        }
        assert next(t for t in exported["teams"] if t["name"] == "nlp")["groups"] == ["gpu-nlp"]
        assert policy_apply(text=dump_policy(policy_current())).changed is False

    def test_a_policy_without_groups_exports_none(self, db):
        data = example()
        del data["roles"]
        for team in data["teams"]:
            del team["groups"]
        policy_apply(text=policy_yaml(data))

        exported = yaml.safe_load(dump_policy(policy_current()))

        assert "roles" not in exported
        assert all("groups" not in team for team in exported["teams"])

    def test_a_changed_mapping_is_reported_old_to_new(self, example_policy):
        data = example()
        data["roles"] = {"finance": {"groups": ["finance-gpu", "controllers"]}}
        next(t for t in data["teams"] if t["name"] == "nlp")["groups"] = ["gpu-nlp", "gpu-llm"]

        report = policy_apply(text=policy_yaml(data))

        assert report.render().splitlines() == [
            "~ roles finance: changed",
            "    groups: [finance-gpu] → [controllers, finance-gpu]",
            "~ roles admin: changed",
            "    groups: [gpu-admins] → []",
            "~ teams nlp: changed",
            "    groups: [gpu-nlp] → [gpu-llm, gpu-nlp]",
        ]
        assert RoleGroups.objects.get(role="admin").groups == []

    def test_bad_groups_and_roles_are_refused_naming_the_field_and_nothing_is_stored(
        self, example_policy
    ):
        data = example()
        next(t for t in data["teams"] if t["name"] == "nlp")["groups"] = "gpu-nlp"
        next(t for t in data["teams"] if t["name"] == "vision")["groups"] = [" gpu-vision", ""]
        data["roles"] = {
            "finance": {"groups": [1]},
            "auditor": {"groups": ["audit"]},
            "admin": {"group": ["gpu-admins"]},
        }

        problems = rejected(data)

        assert problems == [
            "teams[vision].groups: not a group name: ' gpu-vision', '' (group names are matched "
            "exactly: no blanks around them, 1 to 256 characters)",
            "teams[nlp].groups: 'gpu-nlp' is not a list of group names",
            "roles[finance].groups: [1] is not a list of group names",
            "roles[auditor]: unknown role (expected one of: admin, finance)",
            "roles[admin].group: unknown field (expected one of: groups)",
        ]
        assert Team.objects.get(name="nlp").groups == ["gpu-nlp"]
        assert RoleGroups.objects.get(role="admin").groups == ["gpu-admins"]

    def test_roles_must_be_a_mapping(self, example_policy):
        assert rejected({"roles": ["finance"]}) == [
            "roles: must be a mapping of roles to {groups: [...]}"
        ]


class TestALoginsGroups:
    def test_groups_give_the_teams_and_roles_the_policy_maps_them_to(self, example_policy):
        outcome = log_in("olga", "gpu-nlp", "gpu-search", "finance-gpu", "not-mapped")

        assert (outcome.joined, outcome.left, outcome.roles_given) == (
            ["nlp", "search"],
            [],
            ["finance"],
        )
        assert teams_for("olga") == ["nlp", "search"]
        olga = get_user_model().objects.get(username="olga")
        assert role_held(olga, FINANCE)
        assert RoleGrant.objects.filter(user=olga, role="finance").exists()

    def test_the_same_groups_again_change_nothing_and_audit_nothing(self, example_policy):
        log_in("olga", "gpu-nlp")
        entries = LogEntry.objects.count()

        outcome = log_in("olga", "gpu-nlp")

        assert not outcome.changed
        assert LogEntry.objects.count() == entries

    def test_a_group_lost_is_a_team_left_audited_and_their_jobs_stay(self, example_policy):
        log_in("olga", "gpu-nlp")
        olga = get_user_model().objects.get(username="olga")
        job = JobFactory(owner=olga, team=Team.objects.get(name="nlp"), state=JobState.RUNNING)

        outcome = log_in("olga")

        assert outcome.left == ["nlp"] and outcome.teams == []
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        entry = LogEntry.objects.filter(object_repr="nlp").latest("id")
        assert (entry.actor, entry.additional_data) == (olga, {"source": "login", "via": VIA})
        assert entry.changes_dict == {
            "members": {"type": "m2m", "operation": "delete", "objects": ["olga"]}
        }

    def test_a_login_never_removes_whom_the_policy_lists(self, example_policy):
        outcome = log_in("mia", "gpu-nlp")  # listed in vision and nlp

        assert outcome.joined == []
        log_in("mia")

        assert teams_for("mia") == ["nlp", "vision"]
        assert set(
            TeamMembership.objects.filter(user__username="mia").values_list("listed", "via_groups")
        ) == {(True, False)}

    def test_a_policy_apply_never_removes_whom_a_group_gave_the_team(self, example_policy):
        log_in("olga", "gpu-nlp")
        data = example()
        next(t for t in data["teams"] if t["name"] == "nlp")["members"] = ["olga"]
        policy_apply(text=policy_yaml(data))  # the policy now lists her too
        next(t for t in data["teams"] if t["name"] == "nlp")["members"] = []

        report = policy_apply(text=policy_yaml(data))  # and stops listing her (and mia…)

        assert "    members: [olga] → []" in report.render().splitlines()
        assert teams_for("olga") == ["nlp"]
        assert "mia" not in Team.objects.get(name="nlp").members.values_list("username", flat=True)
        listed = LogEntry.objects.filter(object_repr="nlp").order_by("id")
        assert [e.changes_dict for e in listed if "listed members" in e.changes_dict] == [
            {"listed members": {"type": "m2m", "operation": "add", "objects": ["olga"]}},
            {"listed members": {"type": "m2m", "operation": "delete", "objects": ["olga"]}},
        ]

    def test_a_role_given_by_hand_is_never_taken_by_a_login(self, example_policy, fiona):
        log_in("fiona", "finance-gpu")
        outcome = log_in("fiona")

        assert outcome.roles_taken == []
        assert role_held(fiona, FINANCE)

    def test_a_role_a_group_gave_is_taken_back_when_no_group_gives_it(self, example_policy):
        log_in("olga", "gpu-admins")
        olga = get_user_model().objects.get(username="olga")
        assert olga.is_staff and olga.is_superuser

        outcome = log_in("olga")

        assert outcome.roles_taken == ["admin"]
        olga.refresh_from_db()
        assert not olga.is_staff and not olga.is_superuser
        assert not RoleGrant.objects.filter(user=olga).exists()
        entries = LogEntry.objects.filter(object_repr="olga").order_by("id")
        assert [e.changes_dict for e in entries] == [
            {"admin": ["no", "yes"]},
            {"admin": ["yes", "no"]},
        ]

    def test_a_role_taken_by_hand_meanwhile_is_simply_forgotten(self, example_policy):
        log_in("olga", "finance-gpu")
        olga = get_user_model().objects.get(username="olga")
        role_set(olga, FINANCE, held=False)

        outcome = log_in("olga")

        assert outcome.roles_taken == []
        assert not RoleGrant.objects.filter(user=olga).exists()


class TestTheAdminPages:
    def test_the_policy_page_shows_which_groups_give_which_role_and_team(
        self, client, ada, example_policy
    ):
        client.force_login(ada)

        page = client.get("/manage/policy/").content.decode()

        assert "<li>finance ← <code>finance-gpu</code></li>" in page
        assert "<li>admin ← <code>gpu-admins</code></li>" in page
        assert (
            '<li>team <a href="/manage/policy/teams/nlp/">nlp</a> ← <code>gpu-nlp</code></li>'
            in page
        )

    def test_the_roles_are_checked_then_saved_like_a_policy_file(self, client, ada, example_policy):
        client.force_login(ada)
        text = client.get("/manage/policy/roles/").context["text"]
        assert (
            text
            == "roles:\n  finance:\n    groups: [finance-gpu]\n  admin:\n    groups: [gpu-admins]\n"
        )
        text = text.replace("[gpu-admins]", "[gpu-admins, platform]")

        checked = client.post("/manage/policy/roles/", {"text": text, "check": "1"})
        assert checked.context["report"].render() == (
            "~ roles admin: changed\n    groups: [gpu-admins] → [gpu-admins, platform]\n"
            "Dry run: nothing was written."
        )
        saved = client.post("/manage/policy/roles/", {"text": text, "save": "1"})

        assert saved["Location"] == "/manage/policy/"
        assert RoleGroups.objects.get(role="admin").groups == ["gpu-admins", "platform"]
        entry = LogEntry.objects.filter(object_repr="admin").latest("id")
        assert entry.additional_data == {"source": "page"}

    def test_a_bad_roles_text_is_refused_naming_the_field(self, client, ada, example_policy):
        client.force_login(ada)

        response = client.post(
            "/manage/policy/roles/", {"text": "roles:\n  admin:\n    groups: yes\n", "save": "1"}
        )

        assert response.status_code == 422
        assert response.context["problems"] == [
            "roles[admin].groups: True is not a list of group names"
        ]
        other = client.post("/manage/policy/roles/", {"text": "teams: []\n", "save": "1"})
        assert other.context["problems"] == ["roles: give exactly one section, roles"]

    def test_the_django_admin_edits_the_listed_members_and_keeps_group_members(
        self, client, ada, example_policy
    ):
        ada.is_superuser = True
        ada.save(update_fields=["is_superuser"])
        client.force_login(ada)
        log_in("olga", "gpu-nlp")
        nlp = Team.objects.get(name="nlp")
        form = client.get(f"/admin/queues/team/{nlp.pk}/change/")
        assert "olga" in form.content.decode()  # shown as a member via groups
        users = get_user_model().objects
        data = {
            "name": "nlp",
            "description": nlp.description,
            "namespace": nlp.namespace,
            "cost_center": nlp.cost_center,
            "fair_share_weight": "3",
            "groups": '["gpu-nlp"]',
            "listed_members": [users.get(username="noah").pk],
            "quotas-TOTAL_FORMS": "0",
            "quotas-INITIAL_FORMS": "0",
            "quotas-MIN_NUM_FORMS": "0",
            "quotas-MAX_NUM_FORMS": "1000",
        }

        response = client.post(f"/admin/queues/team/{nlp.pk}/change/", data)

        assert response.status_code == 302, response.content.decode()[:2000]
        assert sorted(nlp.members.values_list("username", flat=True)) == ["noah", "olga"]

    def test_the_audit_log_shows_what_a_login_changed_and_through_which_provider(
        self, client, ada, example_policy
    ):
        log_in("olga", "gpu-nlp", "gpu-admins")
        client.force_login(ada)

        page = client.get("/manage/audit/?source=login").content.decode()

        assert page.count('<tr class="audit-entry">') == 2
        assert f"<small>via {VIA}</small>" in page
        assert "<code>members</code>: ∅ → + olga" in page
        assert "<code>admin</code>: no → yes" in page
