"""``Authorization: Token <key>`` for scripts, checked against hashed personal tokens."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from portal.models import ApiToken, hash_token_key


class ApiTokenAuthentication(authentication.TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key: str):  # type: ignore[override]
        try:
            token = ApiToken.objects.select_related("user").get(
                key_hash=hash_token_key(key), revoked_at__isnull=True
            )
        except ApiToken.DoesNotExist as exc:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.") from exc
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token
