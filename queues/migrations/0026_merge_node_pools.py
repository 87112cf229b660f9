from django.db import migrations


class Migration(migrations.Migration):
    """Node pools (elastic capacity), made beside budgets and partly granted quota requests."""

    dependencies = [
        ("queues", "0024_node_pools_provisioning"),
        ("queues", "0025_merge_budgets_quota_request_granted"),
    ]

    operations = []
