"""The filters every page uses to show what the engine and the cluster wrote."""

from __future__ import annotations

from django.utils.safestring import mark_safe

from portal.templatetags.portal_tags import times


def test_every_utc_stamp_becomes_a_time_element_and_the_rest_is_escaped():
    text = "n2 <b>&</b> back 2026-12-03 14:00 UTC; not before 2026-12-03T08:01:30.25+00:00."

    assert times(text) == (
        'n2 &lt;b&gt;&amp;&lt;/b&gt; back <time datetime="2026-12-03T14:00:00Z">'
        '2026-12-03 14:00 UTC</time>; not before <time datetime="2026-12-03T08:01:30Z">'
        "2026-12-03T08:01:30.25+00:00</time>."
    )


def test_text_already_safe_is_not_escaped_twice_and_no_text_is_empty():
    assert times(mark_safe("a &amp; b at 2026-12-03T08:00:00Z")) == (
        'a &amp; b at <time datetime="2026-12-03T08:00:00Z">2026-12-03T08:00:00Z</time>'
    )
    assert times(None) == ""


def test_what_only_looks_like_a_stamp_is_left_alone():
    # Another zone's offset, and digits run into the date: not UTC stamps of ours.
    for text in ("2026-12-03T08:00:00+01:00", "job 12026-12-03 14:00 UTC"):
        assert times(text) == text
