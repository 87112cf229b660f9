"""A NUL character (``%00``) anywhere in an address is a 400 naming it, on every page and API
endpoint, before any view asks the database (PostgreSQL refuses such strings: these were 500s
there)."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

ADDRESSES = [
    ("GET", "/jobs/?queue=%00"),
    ("GET", "/chargeback/teams/%00/"),
    ("GET", "/manage/audit/?search=%00"),
    ("GET", "/manage/quotas/%00/t4/"),
    ("GET", "/manage/reservations/%00/"),
    ("POST", "/manage/maintenance/%00/return"),
    ("GET", "/queues/%00/"),
    ("GET", "/jobs/?%00=x"),
]


@pytest.mark.parametrize(("method", "address"), ADDRESSES)
def test_a_nul_in_a_page_address_is_400(ada, method, address):
    client = Client()
    client.force_login(ada)

    response = client.generic(method, address)

    assert response.status_code == 400


def test_a_nul_in_an_api_address_is_400_naming_it(ada, api_as):
    response = api_as(ada).get("/api/jobs/?queue=%00")

    assert response.status_code == 400
    assert response.json() == {"detail": "Bad request: the address contains a NUL character (%00)"}


def test_an_address_without_one_is_served_as_before(ada):
    client = Client()
    client.force_login(ada)

    assert client.get("/manage/audit/?search=quota").status_code == 200
