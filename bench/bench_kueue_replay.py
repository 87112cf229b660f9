"""Kueue's scheduler benchmark replayed end to end through the whole portal.

The scenarios are bench/kueue.py's: Kueue's baseline mapped to GPUs (5 GPU classes of 120 GPUs,
30 teams, 15,000 jobs arriving over about 60 s), and ``--scenario large-scale`` (20 classes of
2,000 GPUs on 2,000 nodes, 2,000 teams, 60,000 jobs arriving within 0.4 s). The real pieces,
each in a process of its own: the simulated cluster over HTTP at speed 1 (``python -m
simcluster``), PostgreSQL (the database ``loop_bench``, created and dropped), gunicorn serving
the portal (2 sync workers), a Celery worker (solo pool, with beat) on Redis db 7. A submitter
posts each 100 ms tick's jobs to ``POST /api/jobs/batch/``; a watch on the cluster's pods notes
when each pod is seen running. Then, on the quiet cluster, single jobs through
``POST /api/jobs/``: submission to pod running.

    python bench/bench_kueue_replay.py [--scenario baseline|large-scale] [--cohorts N]
        [--scale 1.0] [--quiet-jobs 20] [--keep-database] [--profile-worker FILE]

``--scale 0.2`` replays a fifth of each stream's jobs (same intervals, at least one per team
and stream) for a quick look; ``--cohorts`` fewer cohorts than the scenario's;
``--profile-worker`` runs the worker under cProfile and writes its stats to FILE;
``--keep-database`` leaves the database ``loop_bench`` behind for a look at the jobs' times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import kueue, synthetic
from bench.bench_web import cpu_seconds, free_port, gunicorn_start
from queues.policy.text import policy_yaml

DATABASE = "loop_bench"
REDIS_DB = 7
HOST = "127.0.0.1"
SUBMITTERS = 4  # batch requests in flight at once (gunicorn answers two at a time)
# INFO: the worker logs each cycle's summary and time, which the report sums up.
WORKER_ARGS = ("-A", "portal", "worker", "--pool", "solo", "--loglevel", "INFO", "--beat")
WORKER_ARGS += ("--schedule",)
SIM_ARGS = ("-m", "simcluster", "--port", "0", "--speed", "1")


MAPPING = """\
### The mapping, and what differs

Kueue's `test/performance/scheduler/configs/baseline/generator.yaml`, mapped as in
`bench/kueue.py`:

- 5 cohorts → 5 GPU classes, each its own borrowing pool of 120 GPUs (6 nodes × 20 GPUs: the
  largest pod fits on one node).
- 6 ClusterQueues per cohort, `nominalQuota: 20`, `borrowingLimit: 100` → 6 teams per class,
  each with a quota of nominal 20, borrowing limit 100 on its class only; one queue per class,
  allowing only that class.
- Workload sets small / medium / large (350 / 100 / 50 per ClusterQueue, one every 100 / 500 /
  1,200 ms, running 200 / 500 / 1,000 ms, priority 50 / 100 / 200, requesting 1 / 5 / 20) →
  the same jobs: one pod of 1 / 5 / 20 GPUs, job priority 50 / 100 / 200,
  `SIM_DURATION_SECONDS` 0.2 / 0.5 / 1 (the simulated cluster runs the pod that long from its
  start, at speed 1; no image pull).
- Workloads created by the test's client → jobs posted to `POST /api/jobs/batch/`, one request
  per 100 ms tick holding that tick's jobs of every team (up to 4 requests in flight).
- BestEffortFIFO → the engine's order (queue priority; jobs within their team's nominal quota
  before jobs that would borrow, as Kueue's cohort ordering; job priority, the team's fair share,
  submission time) with conservative backfill: a later job may start now only if it delays no
  job blocked ahead of it on its class (judged by runtime limits: 1 h here, so hardly ever).
- `reclaimWithinCohort: Any` → a lender takes borrowed GPUs back by preemption whatever the
  borrower's priority: the queue is `preemptible`, which is also what lets its jobs borrow.
- `withinClusterQueue: LowerPriority` → within a team, a higher-priority job may preempt a
  lower one.
- No kube-scheduler, runtimes simulated by the harness → the simulated cluster's scheduler
  binds each pod to the node the portal chose and its kubelet runs it for its duration.
- Time to admission (workload created → quota reserved) → `submitted_at` (the batch stored) →
  the job's first `admitted` event.
- Usage (Kueue's ClusterQueue `flavorsUsage`: quota held by admitted workloads, admission to
  finish) → GPUs held by admitted jobs, from each job's admission to the cycle that saw it end
  or preempted it, over 600 nominal GPUs × the wall time. Beside it, GPUs in use: Σ over usage
  intervals (pod start → end as the cluster reported them) of GPUs × seconds, over the same.

What differs: Kueue's admission is quota reservation in a controller, with the apiserver and
etcd in the same pod on 6 CPUs; here a job is admitted by a reconcile cycle that reads the
cluster from a watch-fed mirror, writes PostgreSQL, and creates a Kubernetes Job over HTTP,
with the web server, the worker, PostgreSQL and the simulated cluster on 2 shared cores. The
engine also writes the waiting jobs' reasons, positions and estimated starts (new jobs' within
2 s, every job's every few seconds to a minute), which Kueue does not. Pod start and end times
are whole seconds, as Kubernetes reports them, so each interval is off by up to a second either
way (unbiased over thousands of pods). A preempted job goes back to the queue; preemptions are
counted as `preempted` events, and a job's first admission counts for its time to admission.

Kueue's figures here are the issue's (wall 351 s, usage 55.9 %, small 215 s, medium 77 s,
large 16.5 s); a later `rangespec.yaml` in Kueue gives averages of 5 runs of 351 s, 58.7 %,
and 215 s / 77 s / 6.7 s."""


LARGE_SCALE_MAPPING = """\
### The mapping of the large-scale scenario

Kueue's `test/performance/scheduler/configs/large-scale/generator.yaml`, mapped as the baseline
(above) with its own numbers (`bench/kueue.py`, `LARGE_SCALE`):

- 20 cohorts → 20 GPU classes of 2,000 GPUs each (100 nodes × 20 GPUs), 2,000 nodes in all.
- 100 ClusterQueues per cohort (`nominalQuota: 20`, `borrowingLimit: 100`) → 100 teams per
  class, 2,000 teams, one queue per class allowing only that class and its 100 teams.
- Workload sets small / medium / large (20 / 7 / 3 per ClusterQueue, one every 20 / 50 / 200 ms,
  running 50 / 100 / 200 ms, priority 50 / 100 / 200, requesting 1 / 5 / 20) → the same jobs:
  60,000 in all, every one submitted within the first 0.4 s (ticks of 100 ms, batches of 500).
- The pending caps per user and per queue are lifted for the run, as for the baseline.

Kueue's figures are the means of 19 CI runs of that configuration (the issue): wall 1,179 s,
quota usage 38.6 %, time to admission small 700 s, medium 256 s, large 98.8 s."""


WHERE_THE_TIME_GOES = """\
### Where the time goes

Profiled with the cycle's steps timed and cProfile, on PostgreSQL with 1,000 and 8,000 jobs
waiting (the machine shared, loaded 8-12 on 2 cores; times are wall times and move by half
from run to run).

- **The loop was waiting, not working.** A submission asked for a cycle with a 1 s countdown;
  a pod's end was noticed by the next 5 s beat; a short job took two cycles to give its GPUs
  back (admitted → running in one, running → succeeded in the next). Now a commit asks for a
  cycle at once, the worker's watch asks for one the moment a pod or a Job ends (a burst
  coalesces into one request, and what happens during a cycle into one follow-up), and a job
  that started and ended between two cycles goes through both in one.
- **Storing the waiting jobs' reasons, positions and estimates** was 10.8 s of a 14.4 s cycle
  at 1,000 waiting jobs: positions and estimates move for nearly all of them every cycle, and
  Django's `bulk_update` built a CASE expression per row and field. Now one `UPDATE … FROM
  jsonb_to_recordset(…)` (0.3-1.1 s for 1,000 rows, 2.3 s for 8,000 on the loaded machine),
  after the cluster was acted on rather than before. Past 500 waiting jobs, those already
  showing reasons are refreshed every 5 s at most — or, when a full refresh took long, after
  ten times as long as it took — and new ones at once, so most cycles' writes follow what
  changed. At 15,000 waiting jobs a full refresh still took 20 s of a 37 s cycle (reading
  15,000 rows back as model instances, sending them, the database's writes).
- **The snapshot** built the waiting jobs as model instances with four related rows each:
  1.1 s at 1,000 jobs, now plain values (0.16 s).
- **One commit per change**: each admission, each created Job's name and each usage interval
  closed was its own transaction, a flush to disk each. Now one commit per pass.
- **A pod that ended and was deleted between two cycles** (a victim of preemption that had just
  finished) lost its reported end: its usage was closed at an estimate. The mirror now keeps
  deleted pods' last states for a few minutes and the usage pass reads them.
- **The batch endpoint** read memberships, quotas and reservations team by team: 52 queries
  for 30 jobs of 30 teams, now 27 (the rest: one look-up per distinct name, the insert).
- **What remains** grows with the queue: the admission engine's plan over every waiting job,
  4.1 s at 8,000 waiting jobs and 12.5 s at 15,000 on the loaded machine (a third of it
  simulating estimated starts; the engine is another issue's), the snapshot (1.6 s at
  15,000), and the reasons' full refresh now and then. Per admitted job the
  loop makes one create call and about eight statements over the job's life (admit, name,
  start, finish, their timeline events, the interval opened and closed). With 1,500 jobs of 20
  GPUs and priority 200 in the full scenario, each cycle can admit only 30 of them (600 GPUs),
  so the full replay's wall time is about (jobs ÷ what one cycle can admit) × the cycle's time
  once thousands wait."""


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def start_simcluster(
    tmp: Path, cohorts: int, scenario: kueue.Scenario
) -> tuple[subprocess.Popen, Path]:
    nodes = tmp / "cluster.yaml"
    nodes.write_text(yaml.safe_dump(kueue.cluster_spec(cohorts, scenario)))
    kubeconfig = tmp / "kubeconfig"
    process = subprocess.Popen(
        [sys.executable, *SIM_ARGS, "--nodes", str(nodes), "--kubeconfig", str(kubeconfig)],
        cwd=synthetic.ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("kubeconfig:"):
            return process, kubeconfig
    raise RuntimeError("the simulated cluster did not start")


def start_worker(env: dict[str, str], tmp: Path, profile: str | None = None) -> subprocess.Popen:
    celery = [str(Path(sys.executable).parent / "celery")]
    if profile:  # the worker under cProfile; its stats are written when it is stopped
        celery = [sys.executable, "-m", "cProfile", "-o", profile, celery[0]]
    return subprocess.Popen(
        [*celery, *WORKER_ARGS, str(tmp / "beat")],
        cwd=synthetic.ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "worker.log").open("w"),
    )


class PodWatch(threading.Thread):
    """Follows the portal's pods and notes, by the wall clock of this process, when each pod is
    first seen running and first seen finished, and the times the cluster reported."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(daemon=True, name="pod-watch")
        from queues.cluster.adapter import Cluster
        from queues.cluster.manifests import MANAGED_BY

        self.cluster = Cluster.from_kubeconfig(str(kubeconfig))
        self.selector = f"app.kubernetes.io/managed-by={MANAGED_BY}"
        self.created: dict[str, float] = {}  # pod UID → first seen at all (epoch seconds)
        self.running: dict[str, float] = {}  # pod UID → first seen running
        self.ended: dict[str, float] = {}  # pod UID → first seen succeeded or failed
        self.job_of: dict[str, int] = {}  # pod UID → portal job id
        self.reported: dict[str, tuple[datetime, datetime]] = {}  # UID → (startedAt, finishedAt)
        self.stopping = threading.Event()
        self.version = self.cluster.list_all_pods().resource_version

    def run(self) -> None:
        from queues.cluster.adapter import ClusterUnreachable

        while not self.stopping.is_set():
            try:
                self._follow()
            except ClusterUnreachable:
                if not self.stopping.is_set():
                    time.sleep(0.1)

    def _follow(self) -> None:
        from queues.cluster.pods import pod_facts

        for event in self.cluster.watch(
            "pods", self.version, timeout_seconds=30, label_selector=self.selector
        ):
            obj = event.get("raw_object") or event.get("object") or {}
            self.version = (obj.get("metadata") or {}).get("resourceVersion", self.version)
            if event["type"] == "BOOKMARK":
                continue
            facts = pod_facts(obj)
            if facts.job_id is None:
                continue
            self.job_of[facts.uid] = facts.job_id
            phase = (obj.get("status") or {}).get("phase")
            now = time.time()
            self.created.setdefault(facts.uid, now)
            if phase in ("Running", "Succeeded", "Failed"):
                self.running.setdefault(facts.uid, now)
            if phase in ("Succeeded", "Failed"):
                self.ended.setdefault(facts.uid, now)
            done = facts.container
            if phase == "Succeeded" and done.started_at and done.finished_at:
                self.reported[facts.uid] = (done.started_at, done.finished_at)

    def first_running_by_job(self) -> dict[int, float]:
        return self.by_job(self.running)

    def by_job(self, seen: dict[str, float], last: bool = False) -> dict[int, float]:
        """``seen`` (pod UID → time) per job: its first pod's time, or with ``last`` its last."""
        pick = max if last else min
        out: dict[int, float] = {}
        for uid, at in list(seen.items()):
            job = self.job_of[uid]
            out[job] = pick(at, out.get(job, at))
        return out


class Api:
    def __init__(self, port: int, token: str) -> None:
        self.base = f"http://{HOST}:{port}"
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(
            self.base + path, data=json.dumps(body).encode(), headers=self.headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{path}: {error.code} {error.read()[:500]!r}") from error


def submit_all(api: Api, arrivals: list[kueue.Arrival], start: float) -> dict[str, float]:
    """Post each 100 ms tick's jobs in one batch request at their time, from a few threads so
    that a slow answer does not hold up the next tick; returns how late the requests left
    (max and mean, seconds) and the batches' latencies."""
    ticks: dict[int, list[kueue.Arrival]] = defaultdict(list)
    for arrival in arrivals:
        ticks[round(arrival.at * 10)].append(arrival)
    lateness: list[float] = []
    latencies: list[float] = []

    def post(chunk: list[kueue.Arrival], due: float) -> None:
        lateness.append(max(0.0, time.time() - due))
        sent = time.perf_counter()
        api.post("/api/jobs/batch/", {"jobs": [a.body() for a in chunk]})
        latencies.append(time.perf_counter() - sent)

    with ThreadPoolExecutor(max_workers=SUBMITTERS) as pool:
        futures = []
        for tick in sorted(ticks):
            due = start + tick / 10
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            chunk = ticks[tick]
            futures += [
                pool.submit(post, chunk[i : i + 500], due) for i in range(0, len(chunk), 500)
            ]
        for future in futures:
            future.result()
    return {
        "late_max": max(lateness),
        "late_mean": sum(lateness) / len(lateness),
        "batch_mean": sum(latencies) / len(latencies),
        "batch_p95": kueue.percentile(latencies, 0.95),
        "batches": len(latencies),
    }


def wait_all_done(total: int, limit: float) -> float:
    """When every job had finished (epoch seconds), once the cycle that saw them end has also
    recorded their pods' usage: a cycle moves the jobs first and opens and closes the usage
    intervals of pods that ran between two cycles after that (seconds later at thousands of
    jobs), and the checks must not read in between."""
    from django.db import connection

    from queues.models import Job, JobState, UsageInterval

    deadline = time.monotonic() + limit
    finished = None
    while time.monotonic() < deadline:
        if finished is None:
            done = Job.objects.filter(
                state__in=[JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]
            ).count()
            if done >= total:
                finished = time.time()
        if finished is not None:
            succeeded = Job.objects.filter(state=JobState.SUCCEEDED)
            recorded = UsageInterval.objects.filter(job__in=succeeded, ended_at__isnull=False)
            if recorded.values("job").distinct().count() >= succeeded.count():
                return finished
            if time.time() - finished > 120:
                return finished  # the checks report what is missing
        time.sleep(0.5)
    connection.close()
    raise RuntimeError(f"not every job finished within {limit:.0f} s")


def worker_cycles(log: Path) -> str:
    """The worker's error lines, and where its cycles' time went: each cycle that changed
    something logs its summary with its steps' seconds (``CycleReport.summary``)."""
    text = log.read_text() if log.exists() else ""
    errors = [line for line in text.splitlines() if re.search(r"ERROR|Traceback", line)]
    note = f"{len(errors)} error lines in the worker's log" + (f": {errors[:3]}" if errors else "")
    cycles = 0
    total = 0.0
    steps: dict[str, float] = {}
    # (celery's "succeeded" line repeats the summary as the task's result: not counted)
    pattern = r'reconcile: admitted [^"\n]* API calls in ([0-9.]+) s \(([^"\n]*)\)'
    for match in re.finditer(pattern, text):
        cycles += 1
        total += float(match.group(1))
        for part in re.finditer(r"([a-z][a-z ()]*?) ([0-9]+\.[0-9]+)(?:, |$)", match.group(2)):
            steps[part.group(1)] = steps.get(part.group(1), 0.0) + float(part.group(2))
    if cycles:
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items())
        note += (
            f"; {cycles:,} cycles that changed something took {total:.1f} s"
            f" (mean {total / cycles:.2f} s): {parts}"
        )
    return note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(kueue.SCENARIOS), default="baseline")
    parser.add_argument("--cohorts", type=int, help="cohorts (GPU classes); the scenario's")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each stream's jobs")
    parser.add_argument("--quiet-jobs", type=int, default=20)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--keep-database", action="store_true", help="leave the database for a look afterwards"
    )
    # two replays at once (several people on one machine) each need their own
    parser.add_argument("--database", default=DATABASE, help="PostgreSQL database to create")
    parser.add_argument("--redis-db", type=int, default=REDIS_DB, help="Redis database number")
    parser.add_argument("--profile-worker", help="cProfile the worker; its stats to this file")
    args = parser.parse_args()
    scenario = kueue.SCENARIOS[args.scenario]
    args.cohorts = args.cohorts or scenario.cohorts
    tmp = Path(tempfile.mkdtemp(prefix="bench-kueue-"))
    processes: list[subprocess.Popen] = []
    watch: PodWatch | None = None
    synthetic.database_create(args.database)
    subprocess.run(
        ["redis-cli", "-n", str(args.redis_db), "FLUSHDB"], capture_output=True, check=False
    )
    try:
        sim, kubeconfig = start_simcluster(tmp, args.cohorts, scenario)
        processes.append(sim)
        port = args.port or free_port()
        env = {
            **synthetic.django_env(args.database),
            "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{args.redis_db}",
            "CLUSTER_MODE": "sim",
            "KUBECONFIG": str(kubeconfig),
            "RECONCILE_ON_COMMIT": "true",
            # Kueue's scenario has no caps on waiting work; one member submits for all teams.
            "MAX_PENDING_JOBS_PER_USER": "100000",
            "MAX_PENDING_JOBS_PER_QUEUE": "100000",
        }
        synthetic.django_setup(
            args.database, **{k: v for k, v in env.items() if k != "DATABASE_URL"}
        )
        import io

        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from portal.models import ApiToken

        call_command("migrate", verbosity=0)
        (tmp / "policy.yaml").write_text(policy_yaml(kueue.policy(args.cohorts, scenario)))
        applied = time.perf_counter()
        call_command("apply_policy", str(tmp / "policy.yaml"), stdout=io.StringIO())
        applied = time.perf_counter() - applied
        user = get_user_model().objects.get(username=kueue.MEMBER)
        _, token = ApiToken.issue(user=user, name="replay")
        server = gunicorn_start(port, env)
        processes.append(server)
        worker = start_worker(env, tmp, args.profile_worker)
        processes.append(worker)
        watch = PodWatch(kubeconfig)
        watch.start()
        api = Api(port, token)
        time.sleep(3)  # the worker connects and its first (beat) cycle syncs the nodes

        arrivals = kueue.arrivals(args.cohorts, args.scale, scenario)
        pids = [sim.pid, worker.pid, *_tree(server.pid)]
        cpu_before = cpu_seconds(pids)
        split_before = [cpu_seconds([sim.pid]), cpu_seconds(_tree(server.pid))]
        load_before = loadavg()
        start_wall = time.time() + 0.5
        start = datetime.fromtimestamp(start_wall, UTC)
        submitted = submit_all(api, arrivals, start_wall)
        all_done = wait_all_done(len(arrivals), limit=max(1800, 2 * scenario.kueue_wall_seconds))
        cpu = cpu_seconds(pids) - cpu_before
        split = (
            cpu_seconds([sim.pid]) - split_before[0],
            cpu_seconds(_tree(server.pid)) - split_before[1],
        )
        cpu_note = (
            f"{cpu:.0f} s (cluster {split[0]:.0f} s, gunicorn {split[1]:.0f} s, worker "
            f"{cpu - sum(split):.0f} s)"
        )
        load_after = loadavg()
        time.sleep(1)
        from django.db import connection

        connection.close()
        result = kueue.outcome(start, args.cohorts, scenario)
        latencies = loop_latencies(watch)
        interval_problems = kueue.intervals_match_pods(dict(watch.reported))
        sim_state = sim_state_of(kubeconfig)
        quiet = quiet_latency(api, watch, args.quiet_jobs, args.cohorts, scenario)
        print(
            report(
                args,
                scenario,
                applied,
                arrivals,
                result,
                submitted,
                latencies,
                quiet,
                sim_state,
                cpu_note,
                all_done - start_wall,
                load_before,
                load_after,
                interval_problems,
                worker_cycles(tmp / "worker.log"),
            )
        )
    finally:
        if watch is not None:
            watch.stopping.set()
        for process in reversed(processes):
            process.terminate()  # a worker under cProfile writes its stats on the way out
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        if "django" in sys.modules:
            from django.db import connections

            connections.close_all()
        if not args.keep_database:
            synthetic.database_drop(args.database)
        subprocess.run(
            ["redis-cli", "-n", str(args.redis_db), "FLUSHDB"], capture_output=True, check=False
        )


def _tree(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid] + [int(c) for c in children]


def loop_latencies(watch: PodWatch) -> dict[str, list[float]]:
    """Where a job's turn goes, in seconds, per job: from its (last) admission to its pod
    first seen (the cycle's rest and the Job's create), then to the pod seen running, and from
    the pod seen ended to the cycle that noted the end (the job's ``succeeded`` event)."""
    from queues.models import EventKind, Job, JobEvent

    created = watch.by_job(watch.created, last=True)
    running = watch.first_running_by_job()
    ended = watch.by_job(watch.ended, last=True)
    noted = dict(JobEvent.objects.filter(kind=EventKind.SUCCEEDED).values_list("job_id", "at"))
    out: dict[str, list[float]] = defaultdict(list)
    rows = Job.objects.values_list("pk", "admitted_at", "started_at", "finished_at")
    for job_id, admitted, started, finished in rows:
        if admitted is None:
            continue
        at = admitted.timestamp()
        # The cluster's own times, in whole seconds (floored: + 0.5 s is unbiased on average),
        # do not depend on how soon a watch delivers them.
        if started is not None:
            out["admitted → started (cluster's time)"].append(started.timestamp() + 0.5 - at)
        if finished is not None and job_id in noted:
            out["ended (cluster's time) → end noted"].append(
                noted[job_id].timestamp() - finished.timestamp() - 0.5
            )
        if job_id in running:
            out["admitted → running"].append(running[job_id] - at)
        if job_id in created:
            out["admitted → pod created"].append(created[job_id] - at)
            if job_id in running and running[job_id] >= created[job_id]:
                out["pod created → running"].append(running[job_id] - created[job_id])
        if job_id in ended and job_id in noted:
            out["pod ended → end noted"].append(noted[job_id].timestamp() - ended[job_id])
    return out


def sim_state_of(kubeconfig: Path) -> dict[str, Any]:
    config = yaml.safe_load(kubeconfig.read_text())
    url = config["clusters"][0]["cluster"]["server"]
    token = config["users"][0]["user"]["token"]
    request = urllib.request.Request(
        url + "/sim/state", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def quiet_latency(
    api: Api, watch: PodWatch, count: int, cohorts: int, scenario: kueue.Scenario
) -> list[float]:
    """On the quiet cluster: one job at a time through ``POST /api/jobs/``, from the request
    sent to its pod seen running."""
    out = []
    for i in range(count):
        team = i % scenario.teams_per_cohort
        body = kueue.Arrival(0, i % cohorts, team, scenario.streams[0], i)
        job = {**body.body(), "name": f"quiet-{i}"}
        sent = time.time()
        job_id = api.post("/api/jobs/", job)["id"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen = watch.first_running_by_job().get(job_id)
            if seen is not None:
                out.append(seen - sent)
                break
            time.sleep(0.01)
        time.sleep(1.0)
    return out


def report(
    args: Any,
    scenario: kueue.Scenario,
    applied: float,
    arrivals: list[kueue.Arrival],
    result: kueue.Outcome,
    submitted: dict[str, float],
    latencies: dict[str, list[float]],
    quiet: list[float],
    sim_state: dict[str, Any],
    cpu: str,
    until_seen_done: float,
    load_before: str,
    load_after: str,
    interval_problems: list[str],
    worker_log: str,
) -> str:
    requests = sim_state.get("requests", {})
    by_class = result.admission_seconds
    rows = [
        f"| measure | {scenario.kueue_note} | GPU Portal (this machine) |",
        "| --- | ---: | ---: |",
        f"| wall time, start to every job finished | {scenario.kueue_wall_seconds:.0f} s | "
        f"{result.wall_seconds:.1f} s |",
        f"| quota usage: GPUs held by admitted jobs (Kueue's measure) | "
        f"{scenario.kueue_usage_percent} % | {result.held_percent:.1f} % |",
        f"| GPUs in use: pods running, as the cluster reported | – | "
        f"{result.usage_percent:.1f} % |",
    ]
    for stream in scenario.streams:
        rows.append(
            f"| mean time to admission, {stream.name} | "
            f"{scenario.kueue_admission_seconds[stream.name]} s | "
            f"{by_class.get(stream.name, float('nan')):.2f} s |"
        )
    a2r = latencies["admitted → running"]
    steps = "; ".join(
        f"{name} mean {sum(v) / len(v):.2f} s, p95 {kueue.percentile(v, 0.95):.2f} s"
        for name, v in latencies.items()
        if name != "admitted → running" and v
    )
    lines = [
        f"Scenario {scenario.name}: {args.cohorts} cohorts × {scenario.teams_per_cohort} teams, "
        f"{len(arrivals):,} jobs (scale {args.scale:g}); policy applied in {applied:.1f} s; "
        "machine load (1/5/15 min) "
        f"{load_before} before, {load_after} after; {os.cpu_count()} cores shared with other "
        "work.",
        "",
        *rows,
        "",
        f"- Jobs: {result.jobs:,} submitted, {result.succeeded:,} succeeded; "
        f"{result.preemptions} preemptions; checks: "
        + ("all passed" if not result.problems else f"**{len(result.problems)} failed**: ")
        + "; ".join(result.problems[:5]),
        "- Usage intervals against the pods' reported start and end: "
        + (
            "all equal"
            if not interval_problems
            else f"**{len(interval_problems)} differ**: {interval_problems[:3]}"
        ),
        f"- Admission → pod seen running: mean {sum(a2r) / max(1, len(a2r)):.2f} s, "
        f"p95 {kueue.percentile(a2r, 0.95):.2f} s ({len(a2r):,} jobs); {steps}.",
        f"- Quiet cluster, `POST /api/jobs/` → pod seen running ({len(quiet)} jobs, one at a "
        f"time): median {kueue.percentile(quiet, 0.5):.2f} s, p95 "
        f"{kueue.percentile(quiet, 0.95):.2f} s.",
        f"- API requests the simulated cluster served during the replay (the benchmark's own "
        f"pod watch included): {requests.get('write', 0):,} writes, "
        f"{requests.get('read', 0):,} reads, {requests.get('watch', 0):,} watches.",
        f"- Submitter: {submitted['batches']} batch requests, mean "
        f"{submitted['batch_mean'] * 1000:.0f} ms (p95 {submitted['batch_p95'] * 1000:.0f} ms); "
        f"behind schedule by {submitted['late_mean']:.2f} s on average, "
        f"{submitted['late_max']:.2f} s at most.",
        f"- CPU used by the simulated cluster, gunicorn and the worker during the replay: "
        f"{cpu} over {until_seen_done:.0f} s; {worker_log}.",
    ]
    mapping = MAPPING if scenario is kueue.BASELINE else MAPPING + "\n\n" + LARGE_SCALE_MAPPING
    return "\n".join(lines) + "\n\n" + mapping + "\n\n" + WHERE_THE_TIME_GOES


if __name__ == "__main__":
    main()
