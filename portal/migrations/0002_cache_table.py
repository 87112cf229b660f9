"""The database cache's table (login lock-outs, API throttles) when no Redis is configured: a
migration, so that `migrate` is all a deployment runs. With Redis as the cache it does nothing."""

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps, schema_editor):
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("portal", "0001_initial")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
