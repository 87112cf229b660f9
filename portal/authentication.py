"""``Authorization: Token <key>`` for scripts, checked against hashed personal tokens."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework import authentication, exceptions

from portal.models import ApiToken, hash_token_key

LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenAuthentication(authentication.TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[User, ApiToken]:
        try:
            token = ApiToken.objects.select_related("user").get(
                key_hash=hash_token_key(key), revoked_at__isnull=True
            )
        except ApiToken.DoesNotExist as exc:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.") from exc
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            # At most one write a minute per token: a script's burst costs reads, not writes.
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token
