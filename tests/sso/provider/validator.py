"""django-oauth-toolkit's validator with a groups claim and the misbehaviour knobs."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator

from tests.sso.provider.knobs import knobs


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class KnobValidator(OAuth2Validator):
    # The groups claim is released with the "groups" scope, as Dex and Authentik do.
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "groups"}

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        claims = {
            "preferred_username": user.username,
            "given_name": user.first_name,
            "family_name": user.last_name,
            "email": user.email,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }
        if knobs().get("omit_groups"):
            del claims["groups"]
        return claims

    def get_id_token_dictionary(self, token: Any, token_handler: Any, request: Any) -> Any:
        claims, expiration_time = super().get_id_token_dictionary(token, token_handler, request)
        current = knobs()
        if current.get("issuer"):
            claims["iss"] = current["issuer"]
        if current.get("audience"):
            claims["aud"] = current["audience"]
        if current.get("expired"):
            now = int(time.time())
            claims["iat"] = claims["auth_time"] = now - 7200
            claims["exp"] = now - 3600
        return claims, expiration_time

    def finalize_id_token(self, id_token: Any, token: Any, token_handler: Any, request: Any) -> str:
        signed: str = super().finalize_id_token(id_token, token, token_handler, request)
        if not knobs().get("tamper"):
            return signed
        header, payload, signature = signed.split(".")
        claims = json.loads(_b64decode(payload))
        # What an attacker between the provider and the portal would want: admin rights.
        claims["groups"] = [*claims.get("groups", []), "gpu-admins"]
        forged = _b64encode(json.dumps(claims, separators=(",", ":")).encode())
        return f"{header}.{forged}.{signature}"
