# The rate card models move here from chargeback (whose 0002 renamed their tables): state only.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0010_node_allocatable_cpu_memory"),
        ("chargeback", "0002_rate_cards_move_to_queues"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="RateCard",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("effective_from", models.DateTimeField(unique=True)),
                        ("currency", models.CharField(max_length=3)),
                        (
                            "price_per_normalized_gpu_hour",
                            models.DecimalField(decimal_places=4, max_digits=12),
                        ),
                        ("note", models.CharField(blank=True, max_length=200)),
                    ],
                    options={
                        "ordering": ["-effective_from"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("price_per_normalized_gpu_hour__gte", 0)),
                                name="rate_card_price_not_negative",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("currency__regex", "^[A-Z]{3}$")),
                                name="rate_card_currency_iso_code",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="RateCardWeight",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("weight", models.DecimalField(decimal_places=3, max_digits=8)),
                        (
                            "gpu_class",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="rate_weights",
                                to="queues.gpuclass",
                            ),
                        ),
                        (
                            "rate_card",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="weights",
                                to="queues.ratecard",
                            ),
                        ),
                    ],
                    options={
                        "ordering": ["rate_card", "gpu_class__name"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("rate_card", "gpu_class"), name="rate_weight_one_per_card_class"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("weight__gt", 0)), name="rate_weight_positive"
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
