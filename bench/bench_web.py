"""Benchmark the member pages and the jobs API against the production server setup.

The synthetic site (bench/synthetic.py: 50 teams, 12 queues, 672 nodes) with 100,000 jobs in a
scratch PostgreSQL database — mostly finished over 90 days, some pending with reasons, positions
and estimates as the engine stores them, some running — served by gunicorn with 2 sync workers
(the Dockerfile's command) on loopback, DEBUG off. Measures:

1. p50/p95 latency of ``/queues/``, the busiest queue's page, ``/jobs/`` (own jobs, and all of
   the member's teams' jobs) and ``GET /api/jobs/``, one request at a time, as a member of three
   teams; then, in-process, the SQL queries and SQL time of one request of each (where the time
   goes).
2. Sustained ``POST /api/jobs/`` submissions per second from a closed-loop load generator on the
   same machine (processes with one request in flight each), its CPU share next to the
   server's, and a check that every accepted job is in the database and none was lost.

Prints markdown tables.

    python bench/bench_web.py [--jobs 100000] [--requests 100] [--clients 4,8] [--seconds 20]

Needs PostgreSQL on 127.0.0.1:5432 (trust auth for ``postgres``; the database ``bench_web`` is
created and dropped) and Redis on 127.0.0.1:6379 (db 14: submissions enqueue a coalesced
reconcile there; no worker runs; flushed at the end).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import synthetic

DATABASE = "bench_web"
REDIS_URL = "redis://127.0.0.1:6379/14"
HOST = "127.0.0.1"
DAYS = 90
CODES = [
    ("QuotaExceeded", "team {team} would exceed its {gpu} quota ({used} of {quota} in use)"),
    ("Priority", "{ahead} jobs of higher priority are ahead of it"),
    ("InsufficientCapacity", "no {gpu} node has {gpus} free GPU(s) now"),
    ("UserLimit", "you already run {used} jobs in this queue (limit 4)"),
    ("Fragmentation", "{gpus} GPUs are free on {gpu} but not on one node"),
]


WHERE_THE_TIME_GOES = """\
### Where the time goes (EXPLAIN ANALYZE and cProfile at 100,000 jobs)

- **The catalog and the queue page read the live numbers the reconcile stored** (free GPUs per
  class, past waits, pending and running counts: one `QueueStats` row per queue, plus the
  per-team expected waits in `QueueEstimate`). The first version summed them per request (two
  sequential scans of the jobs table and ~19,000 + ~4,900 rows into Python: ~350 ms); the
  reconcile now does it once a cycle. What remains per request is the queues, their terms
  (prefetched M2M) and rendering.
- **The queue page lists the first 100 waiting jobs** and says how many wait in all (it used to
  render every one: ~700 rows, 210 KiB for the busiest queue).
- `/jobs/` and `GET /api/jobs/` are paginated and use a fixed number of queries (10 and 4);
  their SQL is the page plus a `COUNT(*)` over the caller's teams' jobs (6,000 rows here).
- **One job a request is bounded by Django and DRF's per-request work, not by the database.** A
  submission costs 11-14 ms of one core in-process (the table above). cProfile of 300 requests
  splits it: `job_submit` ~40 % (one query checks the three memberships, one reads the largest
  allocatable CPU and memory of the queue's nodes; one transaction writes the job and its event
  and takes the coalescing lease in one upsert), the serializer's
  validation ~25 % (three name lookups: team, queue, capability class), the 201 body ~15 %
  (building the serializer's fields is most of it), token authentication ~13 %, the request
  cycle itself the rest. Most of each part is the ORM composing SQL and DRF walking fields,
  not PostgreSQL (a round trip is ~0.4 ms). It was 17 queries and is 9. Two sync workers on two
  shared cores top out near 150 / s that way: 500 / s would need 4 ms a request, about what a
  token-authenticated DRF *read* costs here (~4-7 ms).
- **A sweep goes through `POST /api/jobs/batch/`** (up to 500 jobs, all stored or none, the
  same checks per job, field errors keyed by the job's index): about 0.8 ms of CPU and 0.16
  SQL statements per job at 50 a request, so the same two workers sustain well over
  500 jobs / s (the load rows above), every one in the database.
- The load generator's own CPU is in the load table; it shares the two cores with the server
  and PostgreSQL, so the rates are what this machine gives with all three on it."""


# --- Data ----------------------------------------------------------------------------------------


def jobs_create(total: int, seed: int = 5) -> dict[str, int]:
    """``total`` jobs: 87 % finished over the last 90 days, 8 % pending, 4.5 % running, the rest
    admitted or preempted. Returns how many of each state."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from queues.models import CapabilityClass, GpuClass, Job, JobState, Queue, Team

    rng = random.Random(seed)
    now = timezone.now()
    teams = list(Team.objects.order_by("name").prefetch_related("members"))
    members = {t.pk: list(t.members.all()) for t in teams}
    queues = list(Queue.objects.prefetch_related("allowed_gpu_classes"))
    allowed = {q.pk: [g for g in q.allowed_gpu_classes.all()] for q in queues}
    capability = CapabilityClass.objects.get(name="any-gpu")
    classes = list(GpuClass.objects.all())
    assert classes and get_user_model().objects.exists()
    states = (
        [JobState.SUCCEEDED] * 700
        + [JobState.FAILED] * 100
        + [JobState.CANCELLED] * 70
        + [JobState.PENDING] * 80
        + [JobState.RUNNING] * 45
        + [JobState.ADMITTED] * 3
        + [JobState.PREEMPTED] * 2
    )
    nodes = [name for name, _ in synthetic.node_names()]
    rows: list[Job] = []
    made: dict[str, int] = {}
    for i in range(total):
        team = teams[rng.randrange(len(teams))]
        queue = queues[rng.randrange(len(queues))]
        state = states[rng.randrange(len(states))]
        made[state] = made.get(state, 0) + 1
        gpus = rng.choice([1, 1, 1, 2, 4, 8])
        finished = state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
        age = timedelta(seconds=rng.uniform(0, DAYS * 86_400 if finished else 2 * 86_400))
        submitted = now - age
        gpu_class = rng.choice(allowed[queue.pk])
        job = Job(
            owner=rng.choice(members[team.pk]),
            team=team,
            queue=queue,
            capability_class=capability,
            name=f"job-{i}",
            pods=1,
            gpus_per_pod=gpus,
            image=f"registry.example.com/{team.name}/train:{rng.randrange(40)}",
            command=["python", "train.py", "--config", f"cfg/{rng.randrange(100)}.yaml"],
            args=["--epochs", str(rng.randrange(1, 90))],
            env={"WANDB_PROJECT": team.name, "SEED": str(i)},
            runtime_limit=timedelta(hours=rng.choice([1, 4, 8, 12])),
            priority=rng.randrange(0, 6),
            state=state,
            submitted_at=submitted,
        )
        if state != JobState.PENDING:
            job.admitted_at = submitted + timedelta(seconds=rng.expovariate(1 / 900))
            job.gpu_class = gpu_class
            job.nodes = [rng.choice(nodes)]
            job.capacity_kind = "nominal"
            job.k8s_job_name = f"gpuportal-job-{i}"
        if state in (JobState.RUNNING, JobState.PREEMPTED) or finished:
            job.started_at = job.admitted_at + timedelta(seconds=20)
        if finished:
            job.finished_at = job.started_at + timedelta(minutes=rng.randrange(1, 600))
            job.exit_code = 0 if state == JobState.SUCCEEDED else 1
            job.failure_reason = "Error" if state == JobState.FAILED else ""
        if state == JobState.PENDING:
            code, text = CODES[rng.randrange(len(CODES))]
            details = {
                "team": team.name,
                "gpu": gpu_class.name,
                "used": rng.randrange(30),
                "quota": 26,
                "ahead": rng.randrange(1, 50),
                "gpus": gpus,
            }
            job.pending_reasons = [
                {"code": code, "message": text.format(**details), "details": details, "hint": ""}
            ]
            job.estimated_start = now + timedelta(minutes=rng.randrange(1, 600))
        rows.append(job)
    Job.objects.bulk_create(rows, batch_size=2000)
    # Positions as the engine stores them: plan order within each queue.
    pending = (
        Job.objects.filter(state=JobState.PENDING)
        .order_by("queue_id", "-priority", "submitted_at")
        .only("id", "queue_id")
    )
    by_queue: dict[int, list[Job]] = {}
    for job in pending:
        by_queue.setdefault(job.queue_id, []).append(job)
    changed = []
    for jobs in by_queue.values():
        for position, job in enumerate(jobs, 1):
            job.position, job.queue_length = position, len(jobs)
            changed.append(job)
    Job.objects.bulk_update(changed, ["position", "queue_length"], batch_size=2000)
    return made


def estimates_create() -> None:
    """A queue estimate per queue and team, as the reconcile's probes leave them."""
    from django.utils import timezone

    from queues.models import Queue, QueueEstimate, Team

    now = timezone.now()
    QueueEstimate.objects.bulk_create(
        QueueEstimate(
            queue=q,
            team=t,
            estimated_start=now + timedelta(minutes=(q.pk * 7 + t.pk) % 90),
            computed_at=now,
        )
        for q in Queue.objects.all()
        for t in Team.objects.all()
    )


# --- The server ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def gunicorn_start(port: int, env: dict[str, str]) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "portal.wsgi",
            "--bind",
            f"{HOST}:{port}",
            "--workers",
            "2",
            "--log-level",
            "warning",
        ],
        cwd=synthetic.ROOT,
        env={**os.environ, **env},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise RuntimeError("gunicorn did not start")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (from /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid] + [int(c) for c in children]


# --- Latency -------------------------------------------------------------------------------------


def get(port: int, path: str, headers: dict[str, str]) -> tuple[int, float, bytes]:
    started = time.perf_counter()
    connection = http.client.HTTPConnection(HOST, port, timeout=60)
    connection.request("GET", path, headers={"Host": HOST, **headers})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, time.perf_counter() - started, body


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def where_the_time_goes(path: str, user: Any, token: str) -> tuple[int, float, float]:
    """One request in-process: (SQL queries, SQL ms, total ms), best of three."""
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_HOST=HOST)
    if path.startswith("/api/"):
        headers = {"HTTP_AUTHORIZATION": f"Token {token}"}
    else:
        client.force_login(user)
        headers = {}
    best = None
    spent = [0, 0.0]

    def timer(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent[0] += 1
            spent[1] += time.perf_counter() - started

    for _ in range(3):
        spent[:] = [0, 0.0]
        started = time.perf_counter()
        with connection.execute_wrapper(timer):
            response = client.get(path, **headers)
        total = time.perf_counter() - started
        assert response.status_code == 200, (path, response.status_code)
        result = (spent[0], spent[1] * 1000, total * 1000)
        if best is None or result[2] < best[2]:
            best = result
    assert best is not None
    return best


def submission_cost(token: str, batch: int, rounds: int = 10) -> dict[str, float]:
    """In-process, side by side: CPU milliseconds and SQL statements per job, submitting one job
    a request and ``batch`` jobs a request (alternating, ``rounds`` times ``batch`` jobs each
    way, so that the machine's drift hits both alike)."""
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_HOST=HOST, HTTP_AUTHORIZATION=f"Token {token}")
    job = {
        "team": "team-00",
        "queue": "eval",
        "capability_class": "any-gpu",
        "image": "registry.example.com/eval:1",
        "command": ["python", "eval.py"],
        "runtime_limit": "1h",
    }
    statements = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements[0] += 1
        return execute(sql, params, many, context)

    cpu = {"single": 0.0, "batch": 0.0}
    sql = {"single": 0, "batch": 0}
    for _ in range(rounds):
        for way in ("single", "batch"):
            statements[0] = 0
            started = time.process_time()
            with connection.execute_wrapper(count):
                if way == "single":
                    for _ in range(batch):
                        response = client.post("/api/jobs/", job, content_type="application/json")
                        assert response.status_code == 201, response.content[:300]
                else:
                    response = client.post(
                        "/api/jobs/batch/", {"jobs": [job] * batch}, content_type="application/json"
                    )
                    assert response.status_code == 201, response.content[:300]
            cpu[way] += time.process_time() - started
            sql[way] += statements[0]
    jobs = rounds * batch
    return {
        "single_ms": cpu["single"] / jobs * 1000,
        "batch_ms": cpu["batch"] / jobs * 1000,
        "single_sql": sql["single"] / jobs,
        "batch_sql": sql["batch"] / (rounds * 1),
    }


# --- Load ----------------------------------------------------------------------------------------


def submitter(port: int, token: str, seconds: float, index: int, batch: int, results: Any) -> None:
    """Submit jobs one request after another for ``seconds`` — one job a request, or ``batch``
    jobs a request to ``/api/jobs/batch/`` — and report the ids accepted, failures, latencies
    and this process's CPU seconds."""
    body_of = {
        "team": "team-00",
        "queue": "eval",
        "capability_class": "any-gpu",
        "image": "registry.example.com/eval:1",
        "command": ["python", "eval.py"],
        "gpus_per_pod": 1,
        "runtime_limit": "1h",
    }
    headers = {
        "Host": HOST,
        "Authorization": f"Token {token}",
        "Content-Type": "application/json",
    }
    path = "/api/jobs/batch/" if batch else "/api/jobs/"
    accepted: list[int] = []
    failures: dict[str, int] = {}
    latencies: list[float] = []
    cpu_before = time.process_time()
    deadline = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < deadline:
        n += 1
        if batch:
            jobs = [{**body_of, "name": f"load-{index}-{n}-{i}"} for i in range(batch)]
            body = json.dumps({"jobs": jobs})
        else:
            body = json.dumps({**body_of, "name": f"load-{index}-{n}"})
        started = time.perf_counter()
        try:
            connection = http.client.HTTPConnection(HOST, port, timeout=30)
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            connection.close()
        except OSError as exc:
            failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
            continue
        latencies.append(time.perf_counter() - started)
        if response.status == 201:
            answer = json.loads(data)
            accepted += [j["id"] for j in answer["jobs"]] if batch else [answer["id"]]
        else:
            failures[str(response.status)] = failures.get(str(response.status), 0) + 1
    results.put((accepted, failures, latencies, time.process_time() - cpu_before))


def load(
    port: int, token: str, clients: int, seconds: float, server_pids: list[int], batch: int = 0
) -> dict:
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    server_before = cpu_seconds(server_pids)
    started = time.perf_counter()
    workers = [
        context.Process(target=submitter, args=(port, token, seconds, i, batch, results))
        for i in range(clients)
    ]
    for w in workers:
        w.start()
    collected = [results.get() for _ in workers]
    for w in workers:
        w.join()
    wall = time.perf_counter() - started
    server_cpu = cpu_seconds(server_pids) - server_before
    accepted = [i for c in collected for i in c[0]]
    failures: dict[str, int] = {}
    for c in collected:
        for k, v in c[1].items():
            failures[k] = failures.get(k, 0) + v
    latencies = [x for c in collected for x in c[2]]
    return {
        "clients": clients,
        "requests": len(latencies),
        "wall": wall,
        "accepted": accepted,
        "failures": failures,
        "latencies": latencies,
        "generator_cpu": sum(c[3] for c in collected),
        "server_cpu": server_cpu,
    }


# --- Main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=100, help="per page, after 5 warm-ups")
    parser.add_argument("--clients", default="4,8", help="concurrent submitters per load run")
    parser.add_argument("--seconds", type=float, default=20, help="per load run")
    parser.add_argument(
        "--batch", type=int, default=50, help="jobs a request in the batch rows (0: none)"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-web-"))
    synthetic.database_create(DATABASE)
    server = None
    try:
        synthetic.django_setup(DATABASE, CELERY_BROKER_URL=REDIS_URL)
        synthetic.migrate_and_apply_policy(tmp)
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test import Client

        from portal.models import ApiToken
        from queues.models import Job, JobState, Node

        started = time.perf_counter()
        Node.objects.bulk_create(synthetic.node_rows())
        made = jobs_create(args.jobs)
        estimates_create()
        from django.utils import timezone

        from queues.catalog.services import queue_stats_refresh

        queue_stats_refresh(now=timezone.now())  # as every reconcile does
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        setup = time.perf_counter() - started
        user = get_user_model().objects.get(username=synthetic.BENCH_USER)
        _, token = ApiToken.issue(user=user, name="bench")
        login = Client(HTTP_HOST=HOST)
        login.force_login(user)
        session = login.cookies["sessionid"].value
        busiest = (
            Job.objects.filter(state=JobState.PENDING)
            .values_list("queue__name", flat=True)
            .order_by("queue__name")
        )
        counts: dict[str, int] = {}
        for name in busiest:
            counts[name] = counts.get(name, 0) + 1
        queue_name = max(counts, key=lambda n: counts[n])
        visible = Job.objects.filter(team__members=user).count()
        own = Job.objects.filter(owner=user).count()

        port = free_port()
        server = gunicorn_start(
            port, synthetic.django_env(DATABASE) | {"CELERY_BROKER_URL": REDIS_URL}
        )
        cookie = {"Cookie": f"sessionid={session}"}
        pages = [
            ("/queues/", "catalog, 12 queues", cookie),
            (
                f"/queues/{queue_name}/",
                f"queue detail ({counts[queue_name]:,} pending)",
                cookie,
            ),
            ("/jobs/", f"my jobs ({own:,}), page 1 (25 a page)", cookie),
            ("/jobs/?mine=0", f"my teams' jobs ({visible:,}), page 1", cookie),
            (
                "/api/jobs/",
                f"API, {visible:,} visible, page of 50",
                {"Authorization": f"Token {token}"},
            ),
        ]
        latency_rows = []
        for path, what, headers in pages:
            for _ in range(5):
                status, _, body = get(port, path, headers)
                assert status == 200, (path, status, body[:300])
            times = []
            for _ in range(args.requests):
                status, seconds, body = get(port, path, headers)
                assert status == 200, (path, status)
                times.append(seconds * 1000)
            queries, sql_ms, total_ms = where_the_time_goes(path, user, token)
            latency_rows.append(
                f"| `{path}` | {what} | {statistics.median(times):.0f} | "
                f"{percentile(times, 0.95):.0f} | {max(times):.0f} | {len(body) / 1024:.0f} | "
                f"{queries} | {sql_ms:.0f} | {total_ms - sql_ms:.0f} |"
            )

        cost = submission_cost(token, args.batch or 50)
        before = Job.objects.count()
        pids = process_tree(server.pid)
        load_rows = []
        all_accepted: list[int] = []
        runs = [(c, 0) for c in (int(c) for c in args.clients.split(","))]
        if args.batch:
            runs.append((4, args.batch))
        for clients, batch in runs:
            result = load(port, token, clients, args.seconds, pids, batch=batch)
            all_accepted += result["accepted"]
            lat = [x * 1000 for x in result["latencies"]] or [0.0]
            generator, served = result["generator_cpu"], result["server_cpu"]
            failures = ", ".join(f"{k}: {v}" for k, v in sorted(result["failures"].items()))
            request = f"`/api/jobs/batch/`, {batch} jobs" if batch else "`/api/jobs/`, 1 job"
            load_rows.append(
                f"| {request} | {clients} | {len(result['accepted']) / result['wall']:.0f} | "
                f"{result['requests'] / result['wall']:.0f} | "
                f"{len(result['accepted']):,} | {failures or 'none'} | "
                f"{statistics.median(lat):.0f} | {percentile(lat, 0.95):.0f} | "
                f"{served / result['wall'] * 100:.0f} % | "
                f"{generator / result['wall'] * 100:.0f} % | "
                f"{generator / (generator + served) * 100:.0f} % |"
            )
        stored = set(
            Job.objects.filter(pk__in=all_accepted, name__startswith="load-").values_list(
                "pk", flat=True
            )
        )
        extra = Job.objects.count() - before - len(all_accepted)
        lost = len(set(all_accepted) - stored)

        lines = [
            f"Data: {args.jobs:,} jobs in PostgreSQL ("
            + ", ".join(f"{v:,} {k}" for k, v in sorted(made.items(), key=lambda kv: -kv[1]))
            + f"), 50 teams, 12 queues, 672 nodes; built in {setup:.0f} s. Server: gunicorn, "
            "2 sync workers, DEBUG off, on loopback; the member is in 3 teams.",
            "",
            f"### Page latency (one request at a time, {args.requests} requests each)",
            "",
            "| path | what | p50 (ms) | p95 (ms) | max (ms) | KiB | SQL queries | SQL (ms) | "
            "rest (ms) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *latency_rows,
            "",
            "SQL queries, SQL time and the rest (Python: views, serializers, templates) are from "
            "the same request served in-process, best of three.",
            "",
            f"### Sustained submissions ({args.seconds:.0f} s per row)",
            "",
            "| request | concurrent clients | jobs accepted / s | requests / s | accepted | "
            "failures | p50 (ms) | p95 (ms) | server CPU | generator CPU | "
            "generator's share of CPU used |",
            "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
            *load_rows,
            "",
            f"CPU: 100 % = one core; the machine has {os.cpu_count()}. Every accepted job in the "
            f"database: {len(stored):,} of {len(all_accepted):,} ({lost} lost); "
            f"rows not answered 201: {extra}.",
            "",
            "### What one submission costs (in-process, the two ways side by side)",
            "",
            "| request | CPU per job (ms) | SQL statements per request | per job |",
            "| --- | ---: | ---: | ---: |",
            f"| `/api/jobs/`, 1 job | {cost['single_ms']:.1f} | {cost['single_sql']:.0f} | "
            f"{cost['single_sql']:.0f} |",
            f"| `/api/jobs/batch/`, {args.batch or 50} jobs | {cost['batch_ms']:.1f} | "
            f"{cost['batch_sql']:.0f} | {cost['batch_sql'] / (args.batch or 50):.2f} |",
        ]
        print("\n".join(lines) + "\n\n" + WHERE_THE_TIME_GOES)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(5)
        from django.db import connections

        connections.close_all()
        synthetic.database_drop(DATABASE)
        subprocess.run(["redis-cli", "-n", "14", "FLUSHDB"], capture_output=True, check=False)


if __name__ == "__main__":
    main()
