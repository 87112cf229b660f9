# Team memberships say why someone is in a team (the policy lists them, an identity-provider
# group gives them the team, or both); teams and roles map identity-provider groups.
#
# Team.members gets a ``through`` model on the table Django made for it, kept as it is: the
# state learns the model, the database only gains its two columns (every existing membership
# came from the policy, so it is ``listed``).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0021_submission_keys"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="TeamMembership",
                    fields=[
                        ("id", models.AutoField(primary_key=True, serialize=False)),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to="queues.team",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="team_memberships",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "queues_team_members",
                        "unique_together": {("team", "user")},
                    },
                ),
                migrations.AlterField(
                    model_name="team",
                    name="members",
                    field=models.ManyToManyField(
                        blank=True,
                        related_name="gpu_teams",
                        through="queues.TeamMembership",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            database_operations=[],
        ),
        migrations.AddField(
            model_name="teammembership",
            name="listed",
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name="teammembership",
            name="via_groups",
            field=models.BooleanField(default=False),
        ),
        migrations.AddConstraint(
            model_name="teammembership",
            constraint=models.CheckConstraint(
                condition=models.Q(("listed", True), ("via_groups", True), _connector="OR"),
                name="team_membership_has_a_reason",
            ),
        ),
        migrations.AddField(
            model_name="team",
            name="groups",
            field=models.JSONField(blank=True, default=list, help_text='e.g. ["gpu-nlp"]'),
        ),
        migrations.CreateModel(
            name="RoleGroups",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[("finance", "finance"), ("admin", "admin")],
                        max_length=16,
                        unique=True,
                    ),
                ),
                ("groups", models.JSONField(blank=True, default=list)),
            ],
            options={"verbose_name": "role groups", "verbose_name_plural": "role groups"},
        ),
        migrations.CreateModel(
            name="RoleGrant",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[("finance", "finance"), ("admin", "admin")], max_length=16
                    ),
                ),
                ("granted_at", models.DateTimeField()),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="role_grants",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("user", "role"), name="role_grant_one_per_role"
                    )
                ],
            },
        ),
    ]
