from django.db import migrations


class Migration(migrations.Migration):
    """Budgets (finance) and partly granted quota requests, made side by side."""

    dependencies = [
        ("queues", "0024_budgets"),
        ("queues", "0024_quota_request_granted"),
    ]

    operations = []
