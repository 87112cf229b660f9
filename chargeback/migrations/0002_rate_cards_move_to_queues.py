# Rate cards are policy that fair share and billing both read: they move to the queues app,
# which owns policy. The tables are renamed in place (no row is copied); queues 0011 takes over
# the models' state.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("chargeback", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterModelTable(name="ratecard", table="queues_ratecard"),
                migrations.AlterModelTable(name="ratecardweight", table="queues_ratecardweight"),
            ],
            state_operations=[
                migrations.DeleteModel(name="RateCardWeight"),
                migrations.DeleteModel(name="RateCard"),
            ],
        ),
    ]
