def test_rate_card_versions_read_as_the_day_they_took_effect():
    from portal.templatetags.portal_tags import rate_cards

    assert rate_cards(["2026-10-15T00:00:00Z"]) == "from 2026-10-15"
    assert rate_cards(["2026-01-01T00:00:00Z", "2026-10-15T12:30:00Z"]) == (
        "from 2026-01-01, from 2026-10-15 12:30 UTC"
    )
    assert rate_cards([]) == ""
    assert rate_cards("2026-10-15T00:00:00Z") == "from 2026-10-15"
