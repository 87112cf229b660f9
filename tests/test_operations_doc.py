"""docs/operations.md names every environment variable the settings read, and nothing they do
not."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def settings_variables() -> set[str]:
    text = (ROOT / "portal" / "settings.py").read_text()
    return set(re.findall(r'env\.\w+\(\s*"([A-Z][A-Z0-9_]*)"', text))


def documented_variables() -> set[str]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Environment", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, flags=re.MULTILINE))


def test_every_variable_the_settings_read_is_documented_and_no_other():
    read = settings_variables()

    assert len(read) > 20  # the pattern still finds them
    assert documented_variables() == read
