from django.db import migrations


class Migration(migrations.Migration):
    """Notifications, made beside node pools, budgets and partly granted quota requests."""

    dependencies = [
        ("queues", "0024_notifications"),
        ("queues", "0026_merge_node_pools"),
    ]

    operations = []
