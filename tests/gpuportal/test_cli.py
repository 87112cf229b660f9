"""The ``gpuportal`` console script, run as a member runs it: the installed script in a subprocess,
against the portal served by ``live_server`` over real HTTP, whose reconcile drives the simulated
cluster (the test runs the cycles a Celery worker would, at the cluster's manual clock). Nothing
is mocked: each exit code comes from a real answer, or from a real closed port.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from gpuportal import render
from gpuportal.cli import SUBMIT_FIELDS
from gpuportal.render import ordinal
from portal.models import ApiToken
from queues.cluster.adapter import Cluster
from queues.jobs.selectors import job_cost_so_far
from queues.jobs.serializers import JobSubmitSerializer
from queues.models import Job, JobState
from queues.reconcile.cycle import reconcile_cycle

GPUPORTAL = str(Path(sys.executable).parent / "gpuportal")
SUBMIT = [
    "submit",
    "--team", "vision",
    "--queue", "batch",
    "--capability", "min-40gb",
    "--gpus", "1",
    "--runtime", "1h",
    "--image", "registry.example/train:1",
]  # fmt: skip

pytestmark = pytest.mark.slow


@pytest.fixture
def portal(live_server, sim_cluster, example_policy, settings, tmp_path):
    """The live portal on the simulated cluster, and ``cycle()``: one reconcile at the
    cluster's time."""
    settings.CLUSTER_KUBECONFIG = str(sim_cluster.kubeconfig)  # the logs API reads pods
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))

    def cycle() -> None:
        reconcile_cycle(cluster=adapter, now=sim_cluster.now())

    yield live_server, cycle
    adapter.close()


def token_of(user) -> str:
    return ApiToken.issue(user=user, name=f"cli-{ApiToken.objects.count()}")[1]


Run = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def environment(tmp_path) -> Callable[..., dict[str, str]]:
    def make(url: str | None = None, token: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPORTAL_")}
        env.update({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")})
        if url is not None:
            env["GPUPORTAL_URL"] = url
        if token is not None:
            env["GPUPORTAL_TOKEN"] = token
        return env

    return make


@pytest.fixture
def gpuportal(portal, mia, environment) -> Run:
    """``gpuportal(*args)``: the console script as mia, with her token in the environment."""
    live_server, _ = portal
    env = environment(live_server.url, token_of(mia))

    def run(*args: str, input: str | None = None, env_override: dict | None = None):
        return subprocess.run(
            [GPUPORTAL, *args],
            env={**env, **(env_override or {})},
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )

    run.env = env  # type: ignore[attr-defined]
    return run


def start(run_env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [GPUPORTAL, *args], env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def drive(process: subprocess.Popen, step: Callable[[], None], *, seconds: float = 60) -> None:
    """Run ``step`` (reconcile, move the clock) until ``process`` ends by itself."""
    deadline = time.monotonic() + seconds
    while process.poll() is None:
        assert time.monotonic() < deadline, "the command did not end"
        step()
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the round trip -------------------------------------------------------------------------------


def test_submit_wait_logs_cancel_round_trip_on_the_simulated_cluster(
    portal, gpuportal, sim_cluster
):
    _, cycle = portal

    def step() -> None:
        cycle()
        sim_cluster.advance(5)

    waiting = start(
        gpuportal.env, *SUBMIT, "--name", "resnet", "-e", "SIM_DURATION_SECONDS=3600",
        "--wait", "--interval", "0.2", "--", "python", "train.py", "--lr", "0.1",
    )  # fmt: skip
    drive(waiting, step)
    out, err = waiting.communicate()

    job = Job.objects.get()
    assert (waiting.returncode, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"Submitted job {job.pk} to queue batch (pending)."
    assert lines[-1].startswith(f"job {job.pk}: running since ")
    assert job.state == JobState.RUNNING
    assert (job.name, job.command) == ("resnet", ["python", "train.py", "--lr", "0.1"])

    sim_cluster.advance(95)  # three progress lines of the simulated trainer
    logs = gpuportal("logs", str(job.pk))
    assert logs.returncode == 0
    pod = job.k8s_job_name
    assert logs.stdout.splitlines()[0] == "[sim] container main started: registry.example/train:1"
    assert f"[sim] pod team-vision/{pod}" in logs.stdout
    assert "[sim] exec ['python', 'train.py', '--lr', '0.1']" in logs.stdout
    assert [line for line in logs.stdout.splitlines() if line.startswith("step ")] == [
        "step 100: loss=2.4078 throughput=1207 samples/s",
        "step 200: loss=2.2304 throughput=1214 samples/s",
        "step 300: loss=2.0666 throughput=1221 samples/s",
    ]

    cancelled = gpuportal("cancel", str(job.pk))
    assert (cancelled.returncode, cancelled.stderr) == (0, "")
    assert cancelled.stdout == f"Cancelled job {job.pk} (its pods are stopping).\n"
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED

    for _ in range(3):  # its pods get the queue's 30 s to stop; then its usage is closed
        cycle()
        sim_cluster.advance(20)
    shown = gpuportal("show", str(job.pk))
    cost = job_cost_so_far(job, now=sim_cluster.now())
    assert cost is not None and cost.amount > 0
    assert (
        f"cost       {cost.amount} EUR in all ({cost.normalized_gpu_hours} normalized GPU-hours)"
        in shown.stdout
    )
    assert "  state      cancelled at " in shown.stdout, shown.stdout

    again = gpuportal("cancel", str(job.pk))
    assert again.returncode == 3
    assert (
        again.stderr
        == f"gpuportal: job {job.pk}: job {job.pk} has already ended (cancelled): nothing to cancel\n"
    )


def test_logs_follow_prints_each_line_once_until_the_job_ends(portal, gpuportal, sim_cluster):
    _, cycle = portal
    quiet = gpuportal(*SUBMIT, "-e", "SIM_DURATION_SECONDS=95", "--quiet")
    assert quiet.returncode == 0
    job_id = int(quiet.stdout)
    for _ in range(3):
        cycle()
        sim_cluster.advance(5)

    following = start(gpuportal.env, "logs", str(job_id), "-f", "--interval", "0.2")

    def step() -> None:
        sim_cluster.advance(10)
        cycle()
        time.sleep(0.3)

    drive(following, step)
    out, err = following.communicate()

    assert (following.returncode, err) == (0, "")
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("step ")] == [
        "step 100: loss=2.4078 throughput=1207 samples/s",
        "step 200: loss=2.2304 throughput=1214 samples/s",
        "step 300: loss=2.0666 throughput=1221 samples/s",
    ]
    assert lines[-1] == "[sim] done: exit code 0"
    assert len(lines) == len(set(lines))  # nothing printed twice
    assert Job.objects.get(pk=job_id).state == JobState.SUCCEEDED


def interrupted(process: subprocess.Popen) -> str:
    """Ctrl-C, and what the command said on stderr as it stopped. In two full-suite runs (and
    never alone) a command went on after the first SIGINT, for reasons not found (a signal
    landing inside the HTTP client under load?): as a person would, press it once more after
    30 s; the command must then stop exactly as after one."""
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        return process.communicate(timeout=30)[1]


def test_ctrl_c_while_waiting_or_following_leaves_the_job_alone(portal, gpuportal, mia):
    waiting = start(gpuportal.env, *SUBMIT, "--wait", "--interval", "0.2")
    assert waiting.stdout is not None
    assert waiting.stdout.readline().startswith("Submitted job ")
    assert "pending" in waiting.stdout.readline()  # it is looking now
    time.sleep(0.5)
    err = interrupted(waiting)

    job = Job.objects.get()
    assert waiting.returncode == 130
    assert err.strip() == (
        f"Stopped following job {job.pk}; it is left as it was (gpuportal cancel {job.pk} cancels it)."
    )
    assert (job.state, job.events.filter(kind="cancelled").exists()) == (JobState.PENDING, False)

    following = start(gpuportal.env, "logs", str(job.pk), "-f", "--interval", "0.2")
    time.sleep(1.5)
    err = interrupted(following)
    assert following.returncode == 130
    assert err.strip() == f"Stopped following the logs of job {job.pk}; the job goes on."
    job.refresh_from_db()
    assert job.state == JobState.PENDING


# --- reading --------------------------------------------------------------------------------------


def test_show_and_why_say_every_reason_with_its_numbers_and_hint(portal, gpuportal):
    _, cycle = portal
    # Two gangs of 16 GPUs: the first takes vision's h100 quota and borrowing (8 + 8).
    gang = ["submit", "-t", "vision", "-Q", "training", "-c", "bf16-large", "--pods", "2",
            "--gpus", "8", "-r", "1h", "-i", "registry.example/train:1", "--quiet"]  # fmt: skip
    assert gpuportal(*gang).returncode == 0
    cycle()
    submitted = gpuportal(*gang)
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout)
    cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.PENDING and job.pending_reasons

    why = gpuportal("why", str(job_id))
    assert why.returncode == 0
    expected = [f"Job {job_id} is pending, {ordinal_of(job)} in queue training."]
    for i, reason in enumerate(job.pending_reasons, start=1):
        expected.append(f"{i}. {reason['code']}: {reason['message']}")
        if reason["details"]:
            expected.append(f"   numbers: {render.numbers(reason['details'])}")
        if reason["hint"]:
            expected.append(f"   hint: {reason['hint']}")
    assert why.stdout.splitlines()[: len(expected)] == expected

    as_json = gpuportal("why", str(job_id), "--json")
    assert json.loads(as_json.stdout) == job.pending_reasons
    codes = gpuportal("why", str(job_id), "--quiet")
    assert codes.stdout.split() == [r["code"] for r in job.pending_reasons]

    shown = gpuportal("show", str(job_id))
    assert f"  waits      {job.pending_reasons[0]['message']}" in shown.stdout
    assert "  cost       nothing yet" in shown.stdout
    detail = json.loads(gpuportal("show", str(job_id), "--json").stdout)
    assert (detail["id"], detail["state"], detail["cost_so_far"]) == (job_id, "pending", None)


def ordinal_of(job: Job) -> str:
    return f"{ordinal(job.position)} of {job.queue_length} waiting"


def test_jobs_lists_mine_and_filters_as_the_api_does(portal, gpuportal, sara, mia):
    first = int(gpuportal(*SUBMIT, "--name", "one", "-q").stdout)
    second = int(gpuportal(*SUBMIT, "--name", "two", "-q").stdout)
    listed = gpuportal("jobs")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "TEAM",
        "QUEUE",
        "GPUS",
        "STATE",
        "SINCE",
        "/",
        "START",
    ]
    assert [line.split()[:6] for line in lines[1:]] == [
        [str(second), "two", "vision", "batch", "1", "GPU"],
        [str(first), "one", "vision", "batch", "1", "GPU"],
    ]
    assert gpuportal("jobs", "-q").stdout.split() == [str(second), str(first)]
    assert gpuportal("jobs", "-q", "--state", "running").stdout == ""
    assert gpuportal("jobs", "--state", "running").stdout == "No jobs.\n"
    as_json = json.loads(gpuportal("jobs", "--json", "--limit", "1").stdout)
    assert [j["id"] for j in as_json] == [second]
    # Sara (search) sees none of them, not even with --all.
    as_sara = gpuportal("jobs", "--all", "-q", env_override={"GPUPORTAL_TOKEN": token_of(sara)})
    assert (as_sara.returncode, as_sara.stdout) == (0, "")


def test_queues_lists_the_queues_open_to_my_teams(gpuportal):
    listed = gpuportal("queues", "-q")
    assert listed.returncode == 0
    assert sorted(listed.stdout.split()) == ["batch", "interactive", "interactive-mig", "training"]
    table = gpuportal("queues").stdout.splitlines()
    assert table[0].split()[:4] == ["QUEUE", "PREEMPTION", "SHARING", "MAX"]
    batch = next(line for line in table if line.startswith("batch "))
    assert batch.split()[1:3] == ["preemptible", "exclusive"]


def test_preview_asks_the_portal_and_stores_nothing(gpuportal, portal):
    _, cycle = portal
    cycle()  # the portal learns the cluster's nodes
    preview = gpuportal(*SUBMIT, "--preview")
    assert preview.returncode == 0
    assert preview.stdout.startswith("Would start now on ")
    assert preview.stdout.endswith("Nothing was submitted (--preview).\n")
    assert json.loads(gpuportal(*SUBMIT, "--preview", "--json").stdout)["starts_now"] is True
    assert not Job.objects.exists()


def test_a_job_file_has_exactly_the_apis_fields(gpuportal, tmp_path):
    assert set(SUBMIT_FIELDS) == set(JobSubmitSerializer().fields)
    job = tmp_path / "job.yaml"
    job.write_text(
        "team: vision\nqueue: batch\ncapability_class: min-40gb\nimage: registry.example/train:1\n"
        "command: [python, train.py]\nruntime_limit: 2h\nenv: {SIM_DURATION_SECONDS: '60'}\n"
    )
    submitted = gpuportal("submit", "-f", str(job), "--gpus", "2", "--json")
    assert submitted.returncode == 0
    body = json.loads(submitted.stdout)
    assert (body["gpus_per_pod"], body["runtime_limit"], body["command"]) == (
        2,
        "2h",
        ["python", "train.py"],
    )
    assert Job.objects.get().env == {"SIM_DURATION_SECONDS": "60"}

    job.write_text("team: vision\ngpus: 4\nwalltime: 2h\n")
    refused = gpuportal("submit", "-f", str(job))
    assert refused.returncode == 2
    assert refused.stderr.startswith("gpuportal: ")
    assert (
        "unknown field(s) gpus, walltime; a job has team, queue, capability_class" in refused.stderr
    )
    assert Job.objects.count() == 1


# --- login ----------------------------------------------------------------------------------------


def test_login_checks_and_stores_the_token_for_its_owner_only(portal, mia, environment, tmp_path):
    live_server, _ = portal
    env = environment()
    token = token_of(mia)
    stored = tmp_path / "config" / "gpuportal" / "config.json"

    refused = subprocess.run(
        [GPUPORTAL, "login", "--url", live_server.url, "--token", "-"],
        input="gp_wrong\n", env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 3
    assert refused.stderr.startswith("gpuportal: Invalid or revoked token.\n")
    assert not stored.exists()

    logged_in = subprocess.run(
        [GPUPORTAL, "login", "--url", live_server.url + "/", "--token", "-"],
        input=token + "\n", env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert logged_in.returncode == 0, logged_in.stderr
    assert logged_in.stdout.startswith(f"Logged in to {live_server.url} (4 queues open to you)")
    assert json.loads(stored.read_text()) == {"url": live_server.url, "token": token}
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700

    listed = subprocess.run([GPUPORTAL, "queues", "-q"], env=env, capture_output=True, text=True)
    assert (listed.returncode, len(listed.stdout.split())) == (0, 4)
    # The environment overrides the file: a revoked token there is refused.
    overridden = subprocess.run(
        [GPUPORTAL, "queues"], env={**env, "GPUPORTAL_TOKEN": "gp_revoked"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert overridden.returncode == 3


# --- every error exit -----------------------------------------------------------------------------


def test_bad_input_exits_2_with_the_apis_field_messages(gpuportal):
    refused = gpuportal(*SUBMIT[:-4], "--runtime", "4d", "--image", "registry.example/train:1")
    assert refused.returncode == 2
    assert refused.stderr == "gpuportal: runtime_limit: 4d is over queue batch's maximum of 3d\n"
    assert not Job.objects.exists()

    stranger = gpuportal("submit", "--team", "search", *SUBMIT[3:])
    assert stranger.returncode == 2
    assert "gpuportal: team: you are not a member of team search" in stranger.stderr

    assert gpuportal("show", "twelve").returncode == 2
    assert gpuportal("jobs", "--state", "sleeping").returncode == 2  # click's usage error
    missing = gpuportal("submit", "--team", "vision")
    assert (missing.returncode, missing.stderr) == (
        2,
        "gpuportal: missing --queue, --capability, --image (or give them in -f job.yaml)\n",
    )


def test_not_logged_in_exits_2_and_says_how(environment):
    result = subprocess.run([GPUPORTAL, "jobs"], env=environment(), capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == (
        "gpuportal: no the portal's URL: run gpuportal login (or set GPUPORTAL_URL and "
        "GPUPORTAL_TOKEN)\n"
    )


def test_refused_exits_3(gpuportal, portal, mia):
    victor = get_user_model().objects.get(username="victor")  # vision, like mia
    victors = int(
        gpuportal(*SUBMIT, "-q", env_override={"GPUPORTAL_TOKEN": token_of(victor)}).stdout
    )
    refused = gpuportal("cancel", str(victors))
    assert refused.returncode == 3
    assert refused.stderr == (
        f"gpuportal: job {victors}: only the job's owner (victor) or an admin may cancel it\n"
    )
    assert gpuportal("jobs", env_override={"GPUPORTAL_TOKEN": "gp_nonsense"}).returncode == 3


def test_not_found_exits_4_also_for_another_teams_job(gpuportal, sara):
    submitted = gpuportal(
        "submit", "--team", "search", "--queue", "batch", "--capability", "any-gpu",
        "-i", "registry.example/serve:1", "-q", env_override={"GPUPORTAL_TOKEN": token_of(sara)},
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    sara_job = int(submitted.stdout)
    for args in (["show", "999999"], ["show", str(sara_job)], ["logs", str(sara_job)]):
        result = gpuportal(*args)
        assert (result.returncode, result.stderr) == (4, "gpuportal: Not found.\n"), args
    both = gpuportal("cancel", str(sara_job), "999999")
    assert both.returncode == 4
    assert (
        both.stderr == f"gpuportal: job {sara_job}: Not found.\ngpuportal: job 999999: Not found.\n"
    )


def test_an_unreachable_portal_exits_5(gpuportal):
    result = gpuportal("jobs", env_override={"GPUPORTAL_URL": f"http://127.0.0.1:{free_port()}"})
    assert result.returncode == 5
    assert result.stderr.startswith("gpuportal: cannot reach the portal at http://127.0.0.1:")
    assert result.stderr.endswith(": connection refused or host unknown\n")


def test_every_command_has_help(environment):
    commands = [
        "login",
        "logout",
        "queues",
        "submit",
        "jobs",
        "show",
        "why",
        "logs",
        "cancel",
        "usage",
    ]
    for command in commands:
        result = subprocess.run(
            [GPUPORTAL, command, "--help"], env=environment(), capture_output=True, text=True
        )
        assert result.returncode == 0, command
        assert result.stdout.startswith(f"Usage: gpuportal {command} "), command


def test_usage_shows_my_teams_statement(gpuportal):
    result = gpuportal("usage", "--json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert set(report) >= {"lines", "totals", "group_by"}
    text = gpuportal("usage")
    assert text.returncode == 0 and text.stdout.startswith("Usage ")
    bad = gpuportal("usage", "--period", "2026-13")
    assert bad.returncode == 2 and bad.stderr.startswith("gpuportal: period: ")


def test_a_projected_estimate_says_so_in_the_client_too():
    # the client prints a job's estimate as the job page does, with the note beside a
    # projected one (queues/admission/projection.py)
    job = {
        "estimated_start": "2026-12-09T10:00:00Z",
        "likely_start": "2026-12-08T16:00:00Z",
        "start_range_low": "2026-12-08T12:00:00Z",
        "start_range_high": "2026-12-08T20:00:00Z",
        "estimated_start_note": "projected from the work queued ahead of it",
    }
    told = render.estimate(job)
    assert told.startswith("likely ")
    assert told.endswith(
        ", at the latest 2026-12-09 10:00 UTC (projected from the work queued ahead of it)"
    )
    assert render.estimate({**job, "estimated_start_note": ""}).endswith(
        "at the latest 2026-12-09 10:00 UTC"
    )
