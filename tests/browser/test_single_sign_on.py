"""Single sign-on in the browser: the login page's button, the identity provider's own login
form (the test provider of tests/sso/, a real process), back to the portal with the teams the
person's groups give, and out again."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Screenshot
from tests.sso.conftest import PASSWORD, oidc_provider, sso  # noqa: F401 (fixtures)
from tests.sso.servers import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_person_logs_in_with_single_sign_on_and_out_again(
    page: Page,
    screenshot: Screenshot,
    example_policy,
    sso: OidcProvider,  # noqa: F811
):
    sso.person("olga", password=PASSWORD, groups=["gpu-nlp", "gpu-vision"])

    page.goto("/jobs/new")
    expect(page).to_have_url(re.compile(r"/login/\?next=/jobs/new$"))
    screenshot("login page")
    page.get_by_role("link", name="Log in with single sign-on").click()

    expect(page.get_by_role("heading", name="Test identity provider")).to_be_visible()
    page.fill("#idp-username", "olga")
    page.fill("#idp-password", PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    expect(page).to_have_url(re.compile(r"/jobs/new$"))
    expect(page.locator(".messages")).to_have_text(
        "Your groups at your identity provider changed: you joined nlp and vision."
    )
    expect(page.locator(".who span")).to_have_text("olga")
    screenshot("back in the portal")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))
    page.goto("/queues/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/queues/$"))
