"""Django admin is usable as is for every model; personal API tokens."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib import admin
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from portal.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(client, django_user_model, example_policy):
    user = django_user_model.objects.create_superuser("root", password="pw-for-tests")
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "model",
    [m for m in admin.site._registry if m._meta.app_label in ("portal", "queues", "chargeback")],
    ids=lambda m: m._meta.label,
)
def test_every_model_has_a_working_list_and_add_page(superuser_client, model):
    opts = model._meta

    listing = superuser_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
    adding = superuser_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))

    assert listing.status_code == 200
    # 403: rate cards' weights are add-only inline; tokens are issued on /tokens/ only
    assert adding.status_code in (200, 403)


def test_a_stored_rate_card_is_read_only_in_the_admin(superuser_client):
    from queues.models import RateCard

    card = RateCard.objects.get()

    page = superuser_client.get(reverse("admin:queues_ratecard_change", args=[card.pk]))

    assert page.status_code == 200
    assert b'name="price_per_normalized_gpu_hour"' not in page.content


def test_a_token_is_printed_once_and_only_its_hash_is_stored(mia):
    out = StringIO()

    call_command("create_api_token", "mia", "scripts", stdout=out)

    key = out.getvalue().strip()
    token = ApiToken.objects.get(user=mia)
    assert key.startswith("gpt_")
    assert key not in (token.key_hash, token.key_prefix)
    assert token.key_prefix == key[:10]
    with pytest.raises(CommandError, match="mia already has a token named 'scripts'"):
        call_command("create_api_token", "mia", "scripts", stdout=StringIO())


def test_a_revoked_token_no_longer_authenticates(api, mia):
    token, key = ApiToken.issue(user=mia, name="old")
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/queues/").status_code == 200
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None

    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())

    assert api.get("/api/queues/").status_code == 401


def test_paging_parameters_are_checked(api_as, mia):
    client = api_as(mia)

    assert client.get("/api/queues/?page_size=2").json()["next"].endswith("page=2&page_size=2")
    assert client.get("/api/queues/?page_size=0").json() == {
        "page_size": ["must be a whole number from 1 to 500"]
    }
    assert client.get("/api/queues/?page=9").json() == {"detail": "Invalid page."}


def test_a_member_creates_a_token_sees_its_key_once_and_revokes_it(client, mia, api):
    client.force_login(mia)

    created = client.post("/tokens/", {"name": "ci-scripts"})

    key = created.context["new_key"]
    assert key.startswith("gpt_")
    assert key in created.content.decode()
    assert 'data-testid="copy-key"' in created.content.decode()
    assert created.context["form"]["name"].value() is None  # cleared for the next token
    assert key not in client.get("/tokens/").content.decode()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/queues/").status_code == 200
    token = ApiToken.objects.get(user=mia)

    client.post(f"/tokens/{token.pk}/revoke")

    assert api.get("/api/queues/").status_code == 401
    assert client.post("/tokens/", {"name": "ci-scripts"}).context["form"].errors == {
        "name": ["You already have a token with this name."]
    }


def test_nobody_revokes_another_members_token(client, mia, sara):
    token, _ = ApiToken.issue(user=sara, name="hers")
    client.force_login(mia)

    assert client.post(f"/tokens/{token.pk}/revoke").status_code == 404
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None


@pytest.mark.parametrize("name", ["ci\u202escripts", "ci\nscripts", "ci\u200bscripts"])
def test_a_token_name_with_hidden_characters_is_refused(client, mia, name):
    client.force_login(mia)

    response = client.post("/tokens/", {"name": name})

    assert response.context["form"].errors == {
        "name": ["must not contain control or invisible formatting characters"]
    }
    assert not ApiToken.objects.filter(user=mia).exists()


def test_the_django_admin_cannot_add_a_token_only_revoke_one(superuser_client, mia):
    # A token added there had an empty hash: unusable, listed on the user's page, and a
    # second add was a 500 (the hash is unique).
    token, _ = ApiToken.issue(user=mia, name="laptop")
    client = superuser_client

    assert client.get("/admin/portal/apitoken/add/").status_code == 403
    added = client.post("/admin/portal/apitoken/add/", {"user": mia.pk, "name": "x"})
    assert added.status_code == 403
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["laptop"]

    page = client.get(f"/admin/portal/apitoken/{token.pk}/change/")
    assert page.status_code == 200
    now = timezone.now()
    changed = client.post(
        f"/admin/portal/apitoken/{token.pk}/change/",
        {
            "revoked_at_0": now.strftime("%Y-%m-%d"),
            "revoked_at_1": now.strftime("%H:%M:%S"),
        },
    )
    assert changed.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert token.name == "laptop" and token.user == mia
