"""What a login through an identity provider tells the rest of the portal."""

from __future__ import annotations

from django.dispatch import Signal

# Sent when an identity provider has vouched for a person, before they are logged in, with
#   user: the portal user they log in as;
#   groups: frozenset of their group names at the provider, or None when it told none;
#   via: the provider in words ("OpenID Connect https://idp.example.org", "LDAP ldap://…");
#   remote_addr: the address the login came from.
# queues answers it (queues.policy.groups.on_identity_verified) with a GroupsOutcome: the
# teams and roles the groups gave or took.
identity_verified = Signal()
