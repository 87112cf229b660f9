from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError

from portal.formatting import HIDDEN_CHARACTERS, has_hidden_characters
from portal.models import ApiToken


class Command(BaseCommand):
    help = "Issue a personal API token for a user; the key is printed once and never stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("name", help="what the token is for, e.g. 'ci-scripts'")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if has_hidden_characters(name):
            raise CommandError(f"the name {HIDDEN_CHARACTERS}")
        try:
            _, key = ApiToken.issue(user=user, name=name)
        except IntegrityError as exc:
            raise CommandError(f"{username} already has a token named {name!r}") from exc
        self.stdout.write(key)
