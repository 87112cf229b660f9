from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "queues"
    verbose_name = "Queues and jobs"

    def ready(self) -> None:
        from portal.sso.signals import identity_verified
        from queues.audit import register_policy_models
        from queues.policy.groups import on_identity_verified

        register_policy_models()
        # A login through an identity provider refreshes the teams and roles its groups give.
        identity_verified.connect(on_identity_verified, dispatch_uid="queues.policy.groups")
