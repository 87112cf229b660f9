def test_rate_card_versions_read_as_the_day_they_took_effect():
    from portal.templatetags.portal_tags import rate_cards

    assert rate_cards(["2026-10-15T00:00:00Z"]) == "from 2026-10-15"
    assert rate_cards(["2026-01-01T00:00:00Z", "2026-10-15T12:30:00Z"]) == (
        "from 2026-01-01, from 2026-10-15 12:30 UTC"
    )
    assert rate_cards([]) == ""
    assert rate_cards("2026-10-15T00:00:00Z") == "from 2026-10-15"


def test_money_is_written_to_the_cent_with_thousands_separated():
    from decimal import Decimal as D

    from portal.formatting import money_text

    assert money_text(D("0")) == "0.00"
    assert money_text(D("999.5")) == "999.50"
    assert money_text(D("1000")) == "1,000.00"
    assert money_text(D("15837.09")) == "15,837.09"
    # Rounded as statements round: half up (away from zero), to the cent.
    assert money_text(D("1234567.891")) == "1,234,567.89"
    assert money_text(D("0.005")) == "0.01"
    assert money_text(D("-1234.5")) == "-1,234.50"
    assert money_text(D("-0.005")) == "-0.01"
    assert money_text(D("-0.004")) == "0.00"  # no "-0.00"
    assert money_text(None) == "—"


def test_the_money_filter_adds_the_currency_only_to_an_amount():
    from decimal import Decimal as D

    from portal.templatetags.portal_tags import money

    assert money(D("15837.09"), "EUR") == "15,837.09 EUR"
    assert money(D("-6"), "EUR") == "-6.00 EUR"
    assert money(D("921.6")) == "921.60"
    assert money(None, "EUR") == "—"


def test_hours_keep_their_places_with_thousands_separated():
    from decimal import Decimal as D

    from portal.formatting import number_text
    from portal.templatetags.portal_tags import hours

    assert number_text(D("19507.210")) == "19,507.210"
    assert number_text(D("999.999")) == "999.999"
    assert number_text(D("0.000")) == "0.000"
    assert number_text(D("-1234")) == "-1,234"
    assert hours(D("28800.000")) == "28,800.000"
    assert hours(None) == "—"
