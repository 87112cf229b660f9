"""A real OpenID Connect provider for the single sign-on tests: a tiny Django project of its
own (django-oauth-toolkit in OIDC mode), run as a separate process by ``tests/sso/servers.py``.

It speaks the real protocol — discovery, the login form, the authorization-code flow with
PKCE, RS256 ID tokens whose keys it publishes as JWKS, end-session — and has a test-only control
API (``/test/…``, behind a bearer token made at run time) with which a test registers the
portal as a client, creates people and their groups, and sets knobs that make the provider
misbehave for real: an ID token from another issuer, for another audience, already expired,
tampered with after signing, or without the groups claim."""
