"""Single sign-on: OpenID Connect (``oidc.py``) and LDAP (``ldap.py``) logins, the portal user an
identity stands for (``identities.py``), the pages (``views.py``).

Teams and roles from the person's groups are the policy's business: a login sends
``signals.identity_verified`` and ``queues`` (which owns the policy) answers it."""
