"""Benchmark one reconcile cycle against the simulated cluster, over real HTTP.

The synthetic site (bench/synthetic.py: 50 teams, 12 queues, 672 nodes / 5,376 GPUs) on a
scratch PostgreSQL database, 5,000 one-GPU jobs running as 5,000 pods of the simulated cluster,
which serves from a process of its own (as an API server would). Then cycles with 0, 200 and
1,000 changes since the last one — half of them jobs finishing in the cluster, a quarter
cancellations, a quarter new submissions — each timed, with its API calls, SQL queries and where
the time goes (the cycle's steps, timed by wrapping them). Prints a markdown table.

    python bench/bench_reconcile.py [--running 5000] [--changes 200,1000] [--profile]

Needs PostgreSQL on 127.0.0.1:5432 (trust auth for ``postgres``; the database ``bench_reconcile``
is created and dropped) and Redis on 127.0.0.1:6379 (db 14, for the coalesced reconcile
requests that cancelling makes; flushed at the end).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing
import pstats
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import synthetic

DATABASE = "bench_reconcile"
REDIS_URL = "redis://127.0.0.1:6379/14"
RUN_QUEUES = ("research", "eval", "interactive")  # allow every GPU class, never preempted
STEPS = (
    "read_cluster",
    "unknown_jobs",
    "nodes_sync",
    "jobs_sync",
    "usage_sync",
    "snapshot_build",
    "with_default_probes",
    "plan",
    "plan_apply",
    "cluster_apply",
    "pending_reasons_store",
    "queue_estimates_store",
    "queue_stats_refresh",
)


WHERE_THE_TIME_GOES = """\
### Where the time goes

- **Reads cost no API call.** In mirror mode (the worker's) the cycle reads the watch-fed copy
  of nodes, pods and Jobs; its API calls are its writes: one create or delete per Job that
  changed, plus reading a team's namespace the first time this client creates a Job in it
  (finished pods cost nothing: their end arrives through the watch). In list mode (`--mode
  list`, as `reconcile --once`) every cycle lists nodes, bound pods, portal pods and portal Jobs
  in pages of 500 (32 requests at 5,000 pods, ~14 MB of JSON).
- **The portal's own work** in a steady cycle is about 0.5-1.5 s at 5,000 running jobs (the
  machine is shared: the same cycle varies by a few tenths from run to run, which is why the
  200-change cycle is measured three times; two runs a day apart gave 1.56-1.75 s and
  1.06-1.13 s): `snapshot_build` ~0.15-0.25 s (5,000 holding jobs read as plain values for the
  engine), `jobs_sync` ~0.1-0.16 s (5,000 jobs, only the fields it reads), `queue_stats_refresh`
  ~0.1 s, the engine's plan ~0.1 s, `usage_sync` ~0.1 s. `read_cluster`
  costs little: the mirror remembers each pod's facts until its resourceVersion changes. Per
  change a cycle adds a conditional UPDATE and a timeline INSERT (the whole `jobs_sync` pass
  commits once) and, for creates and deletes, one API call; the plan grows with the pending jobs
  it places.
- **Writes to the simulated cluster cost 1-4 ms each** (a good part of it the official client
  building and checking the request): the 200-change cycle's 100-150 calls wait ~0.15-0.4 s (the
  first also reads 50 teams' namespaces once), the 1,000-change cycle's 500 ~0.8-1.8 s. They
  cost ~45 ms each before: ~40 ms of it was TCP, not work (`http.server` sent each answer's
  headers and body in two writes with Nagle's algorithm on, so the body waited for the client's
  delayed ACK); the rest was the simulator's scheduler rebuilding its view of all 672 nodes on
  every write and retrying every pending pod (the view is now kept up to date as pods bind and
  end and nodes change, and a pod that fitted nowhere is retried only when one of its nodes
  frees resources or changes). Creating the 5,000 Jobs of the setup went from 20 s to 5 s.
- **Writes are issued one after another.** Issuing them from 4 or 8 threads was measured and did
  not pay on this two-core machine (client and simulator are both Python, both busy), so the
  cycle keeps its simple order.
- **The first cycle** catches up 5,000 starts at once: an UPDATE and a timeline INSERT per job
  (~2 ms each, mostly the ORM) and an interval per pod. It happens once, after the portal was
  away while everything started.
- Fixed after the first runs of this benchmark: `nodes_sync` rewrote all 672 nodes every cycle
  (now only changed ones, and it compared foreign keys by object: a query per node);
  `usage_sync` re-inserted an interval for every running pod and counted the whole table (now
  only new pods, and open intervals are read with only the fields closing needs);
  `ensure_namespace` read every namespace every cycle (now remembered); the check for unknown
  Jobs put every Job id in one IN list (now only those not holding pods); `read_cluster` turned
  all 5,000 mirrored pods into facts every cycle (now only those that changed);
  `queue_stats_refresh` loaded every holding job to sum GPUs (the database sums them now, and it
  runs after the creates and deletes); `snapshot_build` made a model instance for every holding
  job and five related rows (now plain values: 0.8 s to 0.2 s); `jobs_sync` loaded every job's
  JSON fields it never reads; the adapter built client models of every created Job and delete
  answer it then dropped."""


# --- The simulated cluster, in a process of its own ---------------------------------------------


def serve(manifests: Path, kubeconfig: Path, start: str, ready: Any) -> None:
    """Build the cluster with every Job of ``manifests`` already created, then serve it."""
    from simcluster import ManualClock, SimCluster, SimServer, parse_cluster

    cluster = SimCluster(
        parse_cluster(synthetic.cluster_spec()),
        clock=ManualClock(datetime.fromisoformat(start)),
        history_size=50_000,
    )
    jobs = json.loads(manifests.read_text())
    for namespace in sorted({m["metadata"]["namespace"] for m in jobs}):
        cluster.create_namespace({"metadata": {"name": namespace}})
    for manifest in jobs:
        cluster.create_job(manifest["metadata"]["namespace"], manifest)
    # SIGTERM is waited for, not handled: the server's threads inherit the blocked mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    server = SimServer(cluster, tick_interval=None).start()
    server.write_kubeconfig(kubeconfig)
    ready.send(server.url)
    signal.sigwait({signal.SIGTERM})
    server.stop()


class SimControl:
    """The side API of the served cluster (``/sim/clock``, ``/sim/state``)."""

    def __init__(self, kubeconfig: Path, url: str) -> None:
        import yaml

        self.url = url
        users = yaml.safe_load(kubeconfig.read_text())["users"]
        self.token = users[0]["user"]["token"]

    def _call(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    def advance(self, seconds: float) -> None:
        self._call("POST", "/sim/clock", {"advance": seconds})

    def now(self) -> datetime:
        return datetime.fromisoformat(self._call("GET", "/sim/state")["now"])


# --- The portal side -----------------------------------------------------------------------------


def step_timers() -> dict[str, float]:
    """Wrap the cycle's steps so each cycle's time is split by step (bench-only; the module's
    functions are looked up at call time, so wrapping them in place is enough)."""
    import queues.admission
    import queues.reconcile.cycle as reconcile

    spent: dict[str, float] = defaultdict(float)

    def timed(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started

        return wrapper

    from queues.cluster.adapter import Cluster

    call = Cluster._call

    def waited(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(self, *args, **kwargs)
        finally:
            spent["api wait"] += time.perf_counter() - started

    Cluster._call = waited  # type: ignore[method-assign]
    for name in STEPS:
        if name == "plan":
            queues.admission.plan = timed(name, queues.admission.plan)
        else:
            setattr(reconcile, name, timed(name, getattr(reconcile, name)))
    return spent


def running_jobs(count: int, finishing: list[tuple[int, int]], now: datetime) -> list[Any]:
    """``count`` one-GPU jobs, admitted on a node each (25 per team and GPU class, packed node by
    node), their Kubernetes Jobs named; ``finishing`` is (how many, after how many seconds)."""
    from django.contrib.auth import get_user_model

    from queues.cluster.manifests import job_name
    from queues.models import CapabilityClass, GpuClass, Job, JobState, Queue, Team

    teams = list(Team.objects.order_by("name"))
    queues = {q.name: q for q in Queue.objects.filter(name__in=RUN_QUEUES)}
    classes = {g.name: g for g in GpuClass.objects.all()}
    owners = {u.username: u for u in get_user_model().objects.all()}
    any_gpu = CapabilityClass.objects.get(name="any-gpu")
    durations = ["inf"] * count
    order = list(range(count))
    random.Random(4).shuffle(order)
    cursor = 0
    for how_many, seconds in finishing:
        for i in order[cursor : cursor + how_many]:
            durations[i] = str(seconds)
        cursor += how_many
    rows = []
    slot = dict.fromkeys(classes, 0)
    for i in range(count):
        team_index, rest = divmod(i, count // len(teams))
        gpu_class = synthetic.ALL[rest % len(synthetic.ALL)]
        node = f"{gpu_class}-{slot[gpu_class] // synthetic.GPUS_PER_NODE:03d}"
        slot[gpu_class] += 1
        team = teams[team_index % len(teams)]
        queue = queues[RUN_QUEUES[i % len(RUN_QUEUES)]]
        rows.append(
            Job(
                owner=owners[synthetic.member_names(team_index % len(teams))[i % 4]],
                team=team,
                queue=queue,
                capability_class=any_gpu,
                name=f"run-{i}",
                image="registry.example.com/train:1",
                command=["python", "train.py"],
                env={"SIM_DURATION_SECONDS": durations[i]},
                runtime_limit=queue.max_runtime,
                state=JobState.ADMITTED,
                gpu_class=classes[gpu_class],
                nodes=[node],
                capacity_kind="nominal",
                submitted_at=now - timedelta(minutes=10),
                admitted_at=now - timedelta(minutes=1),
            )
        )
    Job.objects.bulk_create(rows, batch_size=1000)
    for job in rows:
        job.k8s_job_name = job_name(job.pk)
    Job.objects.bulk_update(rows, ["k8s_job_name"], batch_size=1000)
    return rows


def manifests_of(jobs: list[Any]) -> list[dict[str, Any]]:
    from queues.cluster.manifests import job_manifest
    from queues.models import Job
    from queues.reconcile.plan import launch_spec

    loaded = Job.objects.filter(pk__in=[j.pk for j in jobs]).select_related(
        "team", "queue", "gpu_class"
    )
    return [job_manifest(launch_spec(job)) for job in loaded.order_by("id")]


def make_changes(changes: int, *, finishing_after: float, sim: SimControl, rng: random.Random):
    """``changes`` since the last cycle: half finished in the cluster (their pods' run time
    passes), a quarter cancelled by their owners, a quarter new submissions."""
    from queues.jobs.services import job_cancel
    from queues.models import CapabilityClass, Job, JobState, Queue, Team

    finish = changes // 2
    cancel = changes // 4
    submit = changes - finish - cancel
    if finishing_after:
        sim.advance(finishing_after)
    running = list(
        Job.objects.filter(state=JobState.RUNNING, env__SIM_DURATION_SECONDS="inf")
        .select_related("owner")
        .order_by("id")
    )
    for job in rng.sample(running, cancel):
        job_cancel(job=job, by=job.owner)
    teams = list(Team.objects.order_by("name").prefetch_related("members"))
    queue = Queue.objects.get(name="eval")
    any_gpu = CapabilityClass.objects.get(name="any-gpu")
    now = sim.now()
    Job.objects.bulk_create(
        Job(
            owner=team.members.all()[0],
            team=team,
            queue=queue,
            capability_class=any_gpu,
            name=f"new-{i}",
            image="registry.example.com/eval:1",
            command=["python", "eval.py"],
            env={"SIM_DURATION_SECONDS": "inf"},
            runtime_limit=queue.default_runtime,
            state=JobState.PENDING,
            submitted_at=now,
        )
        for i in range(submit)
        for team in [teams[i % len(teams)]]
    )
    return finish, cancel, submit


def holding_pods() -> int:
    from queues.models import Job, JobState

    return Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING)).count()


def settle(mirror: Any, quiet: float = 0.5, limit: float = 60.0) -> None:
    """Wait until the mirror's watches have delivered what happened (no new resourceVersion for
    ``quiet`` seconds), as the worker's mirror would have between two beats."""
    if mirror is None:
        return
    deadline = time.monotonic() + limit
    last = None
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        now_versions = tuple(f.resource_version for f in mirror.followers.values())
        if now_versions != last:
            last, stable_since = now_versions, time.monotonic()
        elif time.monotonic() - stable_since >= quiet:
            return
        time.sleep(0.05)


def measured_cycle(
    cluster: Any,
    sim: SimControl,
    spent: dict[str, float],
    profile: bool = False,
    mirror: Any = None,
):
    from django.db import connection

    from queues.reconcile.cycle import reconcile_cycle

    spent.clear()
    queries = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        queries[0] += 1
        return execute(sql, params, many, context)

    profiler = cProfile.Profile() if profile else None
    settle(mirror)
    now = sim.now()
    with connection.execute_wrapper(count):
        if profiler:
            profiler.enable()
        report = reconcile_cycle(cluster=cluster, now=now, mirror=mirror)
        if profiler:
            profiler.disable()
    return report, queries[0], dict(spent), profiler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, default=5000)
    parser.add_argument(
        "--changes",
        default="200,200,200,1000",
        help="change-set sizes, one measured cycle each (repeat a size for more samples)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the first change cycle")
    parser.add_argument(
        "--mode",
        choices=["mirror", "list"],
        default="mirror",
        help="read the cluster from the watch-fed mirror (as the worker does) or list it",
    )
    args = parser.parse_args()
    changes = [int(c) for c in args.changes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    synthetic.database_create(DATABASE)
    server = None
    cluster = None
    mirror = None
    try:
        synthetic.django_setup(DATABASE, CELERY_BROKER_URL=REDIS_URL)
        synthetic.migrate_and_apply_policy(tmp)
        from queues.cluster.adapter import Cluster

        start = datetime.now().astimezone().replace(microsecond=0)
        # The jobs of each change set finish one "gap" after the previous set's.
        gap = 600
        finishing = [(c // 2, gap * (k + 1)) for k, c in enumerate(changes)]
        jobs = running_jobs(args.running, finishing, start)
        (tmp / "manifests.json").write_text(json.dumps(manifests_of(jobs)))
        setup_started = time.perf_counter()
        receive, send = multiprocessing.get_context("spawn").Pipe(duplex=False)
        server = multiprocessing.get_context("spawn").Process(
            target=serve,
            args=(tmp / "manifests.json", tmp / "kubeconfig", start.isoformat(), send),
            daemon=True,
        )
        server.start()
        url = receive.recv()
        setup_seconds = time.perf_counter() - setup_started
        sim = SimControl(tmp / "kubeconfig", url)
        cluster = Cluster.from_kubeconfig(str(tmp / "kubeconfig"))
        if args.mode == "mirror":
            from queues.cluster.mirror import ClusterMirror

            mirror = ClusterMirror(cluster).start()
            assert mirror.wait_synced(120), mirror.error()
        spent = step_timers()
        sim.advance(5)  # image pulls done: every pod runs
        rows = []
        rng = random.Random(11)

        def row(label: str, finish: int, cancel: int, submit: int, profile: bool = False):
            holding = holding_pods()
            report, queries, steps, profiler = measured_cycle(cluster, sim, spent, profile, mirror)
            assert report.ran and not report.unreachable, report.summary()
            api_wait = steps.pop("api wait", 0.0)
            top = sorted(steps.items(), key=lambda kv: -kv[1])[:4]
            rows.append(
                f"| {label} | {holding:,} | {finish} / {cancel} / {submit} | "
                f"{report.api_calls} | {report.seconds:.2f} | {api_wait:.2f} | {queries:,} | "
                f"{len(report.admitted)} adm, {report.jobs_created} created, "
                f"{report.jobs_deleted} deleted, {sum(report.transitions.values())} moved, "
                f"{report.intervals_opened} opened, {report.intervals_closed} closed | "
                + ", ".join(f"{name} {seconds:.2f}" for name, seconds in top)
                + " |"
            )
            return profiler

        row("first cycle (catch-up: every pod started)", 0, 0, 0)
        row("steady, 0 changes", 0, 0, 0)
        elapsed = 0
        profile_text = ""
        for k, size in enumerate(changes):
            finish, cancel, submit = make_changes(
                size, finishing_after=gap * (k + 1) - elapsed, sim=sim, rng=rng
            )
            elapsed = gap * (k + 1)
            nth = changes[: k + 1].count(size)
            label = f"{size:,} changes" + (
                f" ({nth} of {changes.count(size)})" if changes.count(size) > 1 else ""
            )
            profiler = row(label, finish, cancel, submit, args.profile and k == 0)
            if profiler:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
                profile_text = out.getvalue()
            # Settle before the next set: admitted pods start, cancelled pods go.
            sim.advance(40)
            elapsed += 40
            from queues.reconcile.cycle import reconcile_cycle

            settle(mirror)
            reconcile_cycle(cluster=cluster, now=sim.now(), mirror=mirror)
            settle(mirror)
            reconcile_cycle(cluster=cluster, now=sim.now(), mirror=mirror)
        row("steady again, 0 changes", 0, 0, 0)
        lines = [
            f"Mode: {args.mode} ("
            + (
                "the cycle reads the watch-fed mirror, as the Celery worker does"
                if args.mode == "mirror"
                else "the cycle lists the cluster, as `reconcile --once` does"
            )
            + ").",
            "",
            f"Cluster: {len(synthetic.node_names())} nodes / "
            f"{len(synthetic.node_names()) * synthetic.GPUS_PER_NODE:,} GPUs, "
            f"{args.running:,} one-GPU jobs running, 50 teams, 12 queues; PostgreSQL; the "
            "simulated cluster serves from its own process over HTTP (setup: "
            f"{setup_seconds:.0f} s to create the {args.running:,} Jobs).",
            "",
            "Changes = jobs finished in the cluster / cancelled / newly submitted since the last "
            "cycle. API calls = Kubernetes API requests of the cycle (list pages of 500 "
            "included); waiting for the API = time inside those calls: the official client's own "
            "work and the simulated cluster's (it answers from one process, under one lock). "
            "Slowest steps include their API waits.",
            "",
            "| cycle | jobs holding pods | changes (fin / canc / new) | API calls | time (s) | "
            "of which waiting for the API (s) | SQL queries | what it did | slowest steps (s) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
            *rows,
        ]
        print("\n".join(lines) + "\n\n" + WHERE_THE_TIME_GOES)
        if profile_text:
            print("\n```\n" + profile_text + "\n```")
    finally:
        if mirror is not None:
            mirror.stop()
        if cluster is not None:
            cluster.close()
        if server is not None and server.is_alive():
            server.terminate()
            server.join(10)
            if server.is_alive():
                server.kill()
                server.join(5)
        from django.db import connections

        connections.close_all()
        synthetic.database_drop(DATABASE)
        subprocess.run(["redis-cli", "-n", "14", "FLUSHDB"], capture_output=True, check=False)


if __name__ == "__main__":
    main()
