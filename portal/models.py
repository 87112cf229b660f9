"""Personal API tokens for scripts (only a hash of the key is stored), and the identities
identity providers vouch for."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models, transaction

TOKEN_PREFIX = "gpt_"


def hash_token_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="api_token_unique_name_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.name} ({self.key_prefix}…)"

    @classmethod
    def issue(cls, *, user: object, name: str) -> tuple[ApiToken, str]:
        """Create a token; returns it and the plain key, which is shown once and never stored."""
        key = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with transaction.atomic():  # a duplicate name fails alone, not the caller's transaction
            token = cls.objects.create(
                user=user, name=name, key_hash=hash_token_key(key), key_prefix=key[:10]
            )
        return token, key


class ExternalIdentity(models.Model):
    """A person as an identity provider knows them (``issuer`` and ``subject``: an OpenID
    Connect issuer and ``sub``, or an LDAP server's URI and the entry's DN), and the portal user
    they log in as. The link is made at their first login and decides every later one, so a
    changed username claim renames nobody and never reaches another person's account
    (``portal.sso.identities``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # The person's groups as the provider told them at the last login (what the policy mapped).
    groups = models.JSONField(default=list, blank=True)
    first_login_at = models.DateTimeField()
    last_login_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "external identities"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="external_identity_one_user_per_subject"
            ),
            models.UniqueConstraint(
                fields=["user", "issuer"], name="external_identity_one_subject_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.subject} at {self.issuer}"
