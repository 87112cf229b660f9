from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "chargeback.ops"
    label = "ops"
    verbose_name = "Operations dashboard and metrics"

    def ready(self) -> None:
        # Celery task failures are counted in every process that runs tasks (queues.counters).
        from chargeback.ops import signals  # noqa: F401
