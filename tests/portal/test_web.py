"""Health, login and logout."""

from __future__ import annotations

import pytest
from django.db import DatabaseError

pytestmark = pytest.mark.django_db


def test_healthz_answers_ok_when_the_database_does(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_healthz_answers_503_when_the_database_does_not(client, monkeypatch):
    # A database that is down cannot be made here without stopping the suite's own; the cursor
    # is made to fail instead (the one mock in this file).
    from django.db.backends.utils import CursorWrapper

    def broken(self, sql, params=None):
        raise DatabaseError("connection refused")

    monkeypatch.setattr(CursorWrapper, "execute", broken)

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "database": "connection refused"}


def test_a_member_logs_in_and_lands_on_the_catalog(client, mia):
    mia.set_password("pw-for-tests")
    mia.save(update_fields=["password"])

    response = client.post("/login/", {"username": "mia", "password": "pw-for-tests"}, follow=True)

    assert response.redirect_chain == [("/queues/", 302)]
    assert b"mia" in response.content
    assert b"Log out" in response.content


def test_a_wrong_password_is_refused_without_saying_which_part(client, mia):
    response = client.post("/login/", {"username": "mia", "password": "nope"})

    assert response.status_code == 200
    assert b"Your username and password didn't match." in response.content


def test_logout_ends_the_session(client, mia):
    client.force_login(mia)

    client.post("/logout/")

    assert client.get("/queues/").status_code == 302


def test_the_home_page_leads_to_the_catalog(client, mia):
    client.force_login(mia)

    assert client.get("/").url == "/queues/"


def test_each_role_lands_where_its_work_is(client, fiona, ada):
    """Finance on the chargeback statement, admins on the admin side — never on an empty
    catalog that says no queue is open to their teams."""
    fiona.set_password("pw-for-tests")
    fiona.save(update_fields=["password"])

    response = client.post("/login/", {"username": "fiona", "password": "pw-for-tests"})

    assert response.url == "/chargeback/"
    client.force_login(ada)
    assert client.get("/").url == "/manage/quotas/"


def test_roles_show_in_the_header(client, fiona, ada):
    client.force_login(fiona)
    assert b"fiona \xc2\xb7 finance" in client.get("/queues/").content
    client.force_login(ada)
    html = client.get("/queues/").content
    assert b"ada \xc2\xb7 admin" in html
    assert b'href="/manage/"' in html  # the admin side; the Django admin is linked from there


def test_a_page_size_in_unicode_digits_is_a_400_naming_the_field(api_as, mia):
    response = api_as(mia).get("/api/jobs/?page_size=³")

    assert response.status_code == 400
    assert response.json() == {"page_size": ["must be a whole number from 1 to 500"]}


def test_a_body_nested_thousands_deep_is_a_400_not_a_500(api_as, mia):
    body = "[" * 10_000 + "]" * 10_000

    response = api_as(mia).post("/api/jobs/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {"detail": "JSON parse error - the body is nested too deeply"}


def test_every_page_names_its_icon_and_the_icon_is_served(client, mia):
    client.force_login(mia)
    html = client.get("/queues/").content.decode()

    assert '<link rel="icon" type="image/svg+xml" href="/static/portal/favicon.svg">' in html
    assert client.get("/static/portal/favicon.svg").status_code == 200
