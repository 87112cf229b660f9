"""Benchmark: a monthly chargeback statement over N usage intervals, beside a plain
SUM … GROUP BY over the same table in the same run.

    python bench/bench_chargeback.py                 # PostgreSQL 1M and 10M, SQLite 1M
    python bench/bench_chargeback.py pg 1000000      # one measurement (a child process)

The statement is the product's own (chargeback.statements.statement): every interval clipped to
the month, split at a mid-month rate-card change and at a mid-month cost-center change of ten
teams, grouped by team × cost center × GPU class × sharing mode, rated and rounded. The rows are
inserted by the database itself (generate_series / a recursive CTE): 50 teams, 4 classes, 1-8
devices, a share of 1, 1/7 or 1/4, up to 12 hours each, about 3 % crossing the month's edges and
0.1 % still open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "bench_chargeback"
SIZES_PG = [1_000_000, 10_000_000]
SIZES_SQLITE = [1_000_000]
REPEAT = 3

PG_INSERT = """
INSERT INTO queues_usageinterval (job_id, pod_uid, pod_name, team_id, cost_center, gpu_class_id,
    node, devices, share_numerator, share_denominator, sharing_mode, started_at, ended_at,
    end_estimated, grace_seconds)
SELECT j.job_id, 'pod-' || g, 'pod-' || g, j.team_id, j.cost_center, c.class_id,
       'node-' || (g %% 672), 1 + (g %% 8),
       1, CASE g %% 10 WHEN 0 THEN 7 WHEN 1 THEN 4 ELSE 1 END,
       CASE g %% 10 WHEN 0 THEN 'mig' WHEN 1 THEN 'time-sliced' ELSE 'exclusive' END,
       s.started_at,
       CASE WHEN g %% 1000 = 0 THEN NULL
            ELSE s.started_at + ((g * 7919) %% 43200) * interval '1 second' END,
       false, 30
FROM generate_series(1::bigint, %(n)s::bigint) g
JOIN LATERAL (SELECT %(month)s::timestamptz - interval '12 hours'
                     + ((g * 104729::bigint) %% (31 * 86400)) * interval '1 second'
                     + ((g * 31) %% 1000000) * interval '1 microsecond' AS started_at) s ON true
JOIN bench_jobs j ON j.slot = g %% 50
JOIN bench_classes c ON c.slot = (g / 50) %% 4
"""

SQLITE_INSERT = """
WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < %(n)s)
INSERT INTO queues_usageinterval (job_id, pod_uid, pod_name, team_id, cost_center, gpu_class_id,
    node, devices, share_numerator, share_denominator, sharing_mode, started_at, ended_at,
    end_estimated, grace_seconds)
SELECT j.job_id, 'pod-' || g, 'pod-' || g, j.team_id, j.cost_center, c.class_id,
       'node-' || (g %% 672), 1 + (g %% 8),
       1, CASE g %% 10 WHEN 0 THEN 7 WHEN 1 THEN 4 ELSE 1 END,
       CASE g %% 10 WHEN 0 THEN 'mig' WHEN 1 THEN 'time-sliced' ELSE 'exclusive' END,
       datetime(%(epoch)s - 43200 + (g * 104729) %% (31 * 86400), 'unixepoch'),
       CASE WHEN g %% 1000 = 0 THEN NULL
            ELSE datetime(%(epoch)s - 43200 + (g * 104729) %% (31 * 86400)
                          + (g * 7919) %% 43200, 'unixepoch') END,
       0, 30
FROM s
JOIN bench_jobs j ON j.slot = g %% 50
JOIN bench_classes c ON c.slot = (g / 50) %% 4
"""

PLAIN = """
SELECT team_id, cost_center, gpu_class_id, sharing_mode, SUM({seconds} * devices)
FROM queues_usageinterval
WHERE started_at < %(we)s AND (ended_at IS NULL OR ended_at > %(ws)s)
GROUP BY team_id, cost_center, gpu_class_id, sharing_mode
"""


def measure(vendor: str, n: int) -> dict[str, object]:
    """In a fresh database: set up, insert ``n`` intervals, time both queries (best of 3)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-chargeback-"))
    if vendor == "pg":
        synthetic.database_create(DATABASE)
        synthetic.django_setup(DATABASE)
    else:
        sys.path.insert(0, str(ROOT))
        os.environ.update(synthetic.django_env(DATABASE))
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        import django

        django.setup()
    from datetime import UTC, datetime, timedelta
    from decimal import Decimal

    from django.db import connection

    synthetic.migrate_and_apply_policy(tmp)
    from chargeback.statements import statement
    from queues.models import (
        CapabilityClass,
        GpuClass,
        Queue,
        RateCard,
        RateCardWeight,
        Team,
        TeamCostCenter,
    )
    from tests.factories import JobFactory

    month, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    now = datetime(2026, 12, 15, tzinfo=UTC)
    # A weight change in the middle of the month, and ten teams changing cost center.
    card = RateCard.objects.create(
        effective_from=month + timedelta(days=14, hours=12),
        currency="EUR",
        price_per_normalized_gpu_hour=Decimal("1.25"),
    )
    RateCardWeight.objects.bulk_create(
        RateCardWeight(rate_card=card, gpu_class=g, weight=Decimal(1 + i))
        for i, g in enumerate(GpuClass.objects.all())
    )
    teams = list(Team.objects.order_by("name"))
    TeamCostCenter.objects.all().delete()
    for team in teams[:10]:
        TeamCostCenter.objects.create(
            team=team, cost_center="CC-NEW", effective_from=month + timedelta(days=20)
        )
    queue, capability = Queue.objects.first(), CapabilityClass.objects.first()
    jobs = [JobFactory(team=t, queue=queue, capability_class=capability) for t in teams]
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE bench_jobs (slot int, job_id int, team_id int, "
            "cost_center varchar(64))"
        )
        cursor.execute("CREATE TEMPORARY TABLE bench_classes (slot int, class_id int)")
        for i, job in enumerate(jobs):
            cursor.execute(
                "INSERT INTO bench_jobs VALUES (%s, %s, %s, %s)",
                [i, job.pk, job.team_id, job.team.cost_center],
            )
        for i, pk in enumerate(GpuClass.objects.order_by("name").values_list("pk", flat=True)):
            cursor.execute("INSERT INTO bench_classes VALUES (%s, %s)", [i, pk])
        started = time.perf_counter()
        if vendor == "pg":
            cursor.execute(PG_INSERT, {"n": n, "month": month})
            cursor.execute("ANALYZE queues_usageinterval")
        else:
            cursor.execute(SQLITE_INSERT, {"n": n, "epoch": int(month.timestamp())})
            cursor.execute("ANALYZE")
        insert_seconds = time.perf_counter() - started
    if vendor == "pg":
        seconds = "EXTRACT(EPOCH FROM (COALESCE(ended_at, %(now)s) - started_at))"
        params: dict[str, object] = {"ws": month, "we": end, "now": now}
    else:
        seconds = "(strftime('%%s', COALESCE(ended_at, %(now)s)) - strftime('%%s', started_at))"
        params = {
            "ws": connection.ops.adapt_datetimefield_value(month),
            "we": connection.ops.adapt_datetimefield_value(end),
            "now": connection.ops.adapt_datetimefield_value(now),
        }
    plain_times, statement_times = [], []
    lines = 0
    for _ in range(REPEAT):
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(PLAIN.format(seconds=seconds), params)
            groups = len(cursor.fetchall())
        plain_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = statement(start=month, end=end, now=now)
        statement_times.append(time.perf_counter() - started)
        lines = len(result.lines)
    total = result.totals.cost
    # Wall times on a shared machine swing with its load. The CPU time the database backend
    # spends on each, serially (no parallel workers), read from /proc, swings much less.
    cpu_plain = cpu_statement = None
    if vendor == "pg":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
            cursor.execute("SET max_parallel_workers_per_gather = 0")
        plain_cpu, statement_cpu = [], []
        for _ in range(REPEAT):
            before = _cpu_seconds(pid)
            with connection.cursor() as cursor:
                cursor.execute(PLAIN.format(seconds=seconds), params)
                cursor.fetchall()
            middle = _cpu_seconds(pid)
            statement(start=month, end=end, now=now)
            plain_cpu.append(middle - before)
            statement_cpu.append(_cpu_seconds(pid) - middle)
        cpu_plain, cpu_statement = min(plain_cpu), min(statement_cpu)
    connection.close()
    if vendor == "pg" and not os.environ.get("BENCH_KEEP"):
        synthetic.database_drop(DATABASE)
    return {
        "vendor": "PostgreSQL" if vendor == "pg" else "SQLite",
        "n": n,
        "insert": insert_seconds,
        "plain": min(plain_times),
        "statement": min(statement_times),
        "groups": groups,
        "cpu_plain": cpu_plain,
        "cpu_statement": cpu_statement,
        "lines": lines,
        "total": {k: str(v) for k, v in total.items()},
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (the database backend, on this machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    if len(sys.argv) == 3:
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
        return
    sizes = [("pg", n) for n in SIZES_PG] + [("sqlite", n) for n in SIZES_SQLITE]
    if os.environ.get("BENCH_CHARGEBACK_SIZES"):  # e.g. "pg:1000000,sqlite:100000"
        sizes = [
            (v, int(n))
            for v, n in (s.split(":") for s in os.environ["BENCH_CHARGEBACK_SIZES"].split(","))
        ]
    results = []
    for vendor, n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, vendor, str(n)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        "Monthly statement (clipped to November 2026, split at a mid-month rate-card change "
        "and ten teams' cost-center changes, grouped by team × cost center × GPU class × "
        "sharing mode, rated and rounded) beside a plain `SUM(seconds × devices) … GROUP BY` "
        f"of the same four columns over the same rows; best of {REPEAT}.\n"
    )
    print(
        "| database | intervals | insert (s) | plain GROUP BY (s) | statement (s) | ratio "
        "| backend CPU, serial: plain / statement (s) | CPU ratio | lines |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        cpu = "–", "–"
        if r["cpu_plain"]:
            cpu = (
                f"{r['cpu_plain']:.2f} / {r['cpu_statement']:.2f}",
                f"{r['cpu_statement'] / r['cpu_plain']:.2f}×",
            )
        print(
            f"| {r['vendor']} | {r['n']:,} | {r['insert']:.1f} | {r['plain']:.2f} | "
            f"{r['statement']:.2f} | {r['statement'] / r['plain']:.2f}× | {cpu[0]} | {cpu[1]} | "
            f"{r['lines']} |"
        )


if __name__ == "__main__":
    main()
