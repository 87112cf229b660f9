from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "queues"
    verbose_name = "Queues and jobs"

    def ready(self) -> None:
        from queues.audit import register_policy_models

        register_policy_models()
