"""The ``gpuportal`` command: one click command per thing a member does (docs/cli.md).

Each command makes its API calls through ``gpuportal.api.Api`` and writes the answer three ways:
a table or a few lines for people (the default), the API's own objects (``--json``), or ids only
(``--quiet``). Errors go to stderr with the API's words; the exit code says what kind they were.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import yaml

from gpuportal import render
from gpuportal.api import EXIT, Api, ApiError
from gpuportal.config import (
    ConfigError,
    Credentials,
    credentials_forget,
    credentials_load,
    credentials_save,
    normalized_url,
)

# The fields of a submission, exactly as POST /api/jobs/ takes them (a job file has these and
# no others; tests/gpuportal checks the list against the API's serializer).
SUBMIT_FIELDS = (
    "team",
    "queue",
    "capability_class",
    "name",
    "pods",
    "gpus_per_pod",
    "cpu_millicores_per_pod",
    "memory_mib_per_pod",
    "declared_gpu_memory_gb",
    "runtime_limit",
    "image",
    "command",
    "args",
    "env",
    "env_from",
    "checkpoint_interval",
    "priority",
)
WAIT_UNTIL = ("running", "succeeded", "failed", "cancelled")
ENDED = ("succeeded", "failed", "cancelled")
INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C

F = TypeVar("F", bound=Callable[..., Any])


# --- plumbing -------------------------------------------------------------------------------------


def fail(exit_code: int, *lines: str) -> NoReturn:
    for line in lines:
        click.echo(f"gpuportal: {line}", err=True)
    sys.exit(exit_code)


def connect() -> Api:
    try:
        return Api(credentials_load())
    except ConfigError as exc:
        fail(EXIT["bad_input"], str(exc))


def output_options(func: F) -> F:
    """``--json`` and ``--quiet``, the two ways a script reads a command's answer."""
    func = click.option("--quiet", "-q", is_flag=True, help="Only ids, one a line (for scripts).")(
        func
    )
    func = click.option("--json", "as_json", is_flag=True, help="The API's own objects, as JSON.")(
        func
    )
    return func


def emit_ids(values: Iterable[Any]) -> None:
    for value in values:
        click.echo(value)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


class PortalGroup(click.Group):
    """Turns every ``ApiError`` into its message and exit code; Ctrl-C into 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as exc:
            fail(exc.exit_code, *exc.lines)


@click.group(cls=PortalGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpu-portal", prog_name="gpuportal")
def main() -> None:
    """GPU Portal from the terminal: queues, jobs, logs and usage through the portal's API.

    Log in once with a personal token from the portal's /tokens/ page:

        gpuportal login --url https://gpus.example.org

    GPUPORTAL_URL and GPUPORTAL_TOKEN override the stored ones. Exit codes: 0 ok, 1 a job
    followed with --wait ended failed or cancelled, 2 bad input, 3 refused, 4 not found,
    5 portal unreachable, 130 interrupted (the job is left alone).
    """


# --- login ----------------------------------------------------------------------------------------


@main.command()
@click.option("--url", help="The portal's address, e.g. https://gpus.example.org.")
@click.option(
    "--token",
    help="A personal token from the portal's /tokens/ page; '-' reads it from stdin. "
    "Asked for (not echoed) when left out.",
)
def login(url: str | None, token: str | None) -> None:
    """Store the portal's URL and your token (in your config directory, mode 0600).

    The token is checked against the portal before it is stored.
    """
    if url is None:
        url = click.prompt("Portal URL")
    if token == "-":
        token = sys.stdin.readline()
    elif token is None:
        token = click.prompt("Token (from /tokens/)", hide_input=True)
    try:
        credentials = Credentials(url=normalized_url(url), token=token.strip())
    except ConfigError as exc:
        fail(EXIT["bad_input"], str(exc))
    if not credentials.token:
        fail(EXIT["bad_input"], "the token is empty")
    queues = Api(credentials).get("/api/queues/")
    count = queues["count"] if isinstance(queues, dict) else len(queues)
    path = credentials_save(url=credentials.url, token=credentials.token)
    click.echo(f"Logged in to {credentials.url} ({count} queues open to you); saved in {path}")


@main.command()
def logout() -> None:
    """Forget the stored URL and token (the token stays valid: revoke it on /tokens/)."""
    if credentials_forget():
        click.echo("Forgot the stored token; revoke it on the portal's /tokens/ page too.")
    else:
        click.echo("No token was stored.")


# --- queues ---------------------------------------------------------------------------------------


def _items(answer: Any) -> list[Any]:
    return list(answer["results"]) if isinstance(answer, dict) else list(answer)


@main.command()
@output_options
def queues(as_json: bool, quiet: bool) -> None:
    """The queues open to your teams: their terms and live numbers."""
    api = connect()
    items = list(api.pages("/api/queues/"))
    if as_json:
        return emit_json(items)
    if quiet:
        return emit_ids(q["name"] for q in items)
    rows = []
    for q in items:
        live = q.get("live") or {}
        wait = live.get("expected_wait_seconds")
        rows.append(
            [
                q["name"],
                q["preemption_class"],
                q["sharing_mode"],
                q["max_runtime"],
                q["expected_wait_target"],
                _wait(wait) if wait is not None else live.get("expected_wait_note"),
                live.get("pending"),
                live.get("running"),
                ", ".join(q["allowed_gpu_classes"]),
            ]
        )
    headers = ["queue", "preemption", "sharing", "max runtime", "wait target", "expected wait"]
    click.echo(table_or_none([*headers, "pending", "running", "gpu classes"], rows, "queues"))


def _wait(seconds: int) -> str:
    return "none" if seconds == 0 else render.duration(seconds)


def table_or_none(headers: list[str], rows: list[list[Any]], what: str) -> str:
    return render.table(headers, rows) if rows else f"No {what}."


# --- submit ---------------------------------------------------------------------------------------


def _job_file(path: str) -> dict[str, Any]:
    """A job file: YAML (or JSON) with exactly the API's submission fields."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        data = yaml.safe_load(text)
    except OSError as exc:
        fail(EXIT["bad_input"], f"{path}: {exc.strerror}")
    except yaml.YAMLError as exc:
        fail(EXIT["bad_input"], f"{path}: not YAML: {exc}")
    if not isinstance(data, dict):
        fail(EXIT["bad_input"], f"{path}: must be a mapping of the job's fields")
    unknown = sorted(str(k) for k in data if k not in SUBMIT_FIELDS)
    if unknown:
        fail(
            EXIT["bad_input"],
            f"{path}: unknown field(s) {', '.join(unknown)}; a job has " + ", ".join(SUBMIT_FIELDS),
        )
    return data


def _pairs(values: Iterable[str], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            fail(EXIT["bad_input"], f"{option} {value!r}: write NAME=VALUE")
        pairs[name] = text
    return pairs


def _secret_refs(values: Iterable[str]) -> dict[str, dict[str, str]]:
    refs = {}
    for name, ref in _pairs(values, "--secret-env").items():
        secret, sep, key = ref.partition(":")
        if not sep or not secret or not key:
            fail(EXIT["bad_input"], f"--secret-env {name}={ref}: write NAME=SECRET:KEY")
        refs[name] = {"secret": secret, "key": key}
    return refs


@main.command(context_settings={"ignore_unknown_options": False})
@click.option("-f", "--file", "job_file", help="A YAML file of the job's API fields ('-': stdin).")
@click.option("--team", "-t", help="Your team that runs it.")
@click.option("--queue", "-Q", help="The queue (gpuportal queues lists yours).")
@click.option("--capability", "-c", "capability_class", help="Capability class, e.g. min-40gb.")
@click.option("--name", "-n", help="A name for the job.")
@click.option("--pods", type=int, help="Pods of the gang (all start or none).")
@click.option("--gpus", "-g", "gpus_per_pod", type=int, help="GPUs (or slices) per pod.")
@click.option("--cpu", "cpu_millicores_per_pod", type=int, help="CPU millicores per pod.")
@click.option("--memory", "memory_mib_per_pod", type=int, help="Memory per pod in MiB.")
@click.option("--gpu-memory", "declared_gpu_memory_gb", type=int, help="GPU memory used (GB).")
@click.option("--runtime", "-r", "runtime_limit", help="Runtime limit: 90m, 4h, 1h30m, 2d.")
@click.option("--checkpoint-interval", help="How often it checkpoints: 30m.")
@click.option("--priority", type=int, help="Within the queue's bounds.")
@click.option("--image", "-i", help="The container image.")
@click.option("--env", "-e", multiple=True, metavar="NAME=VALUE", help="A variable (repeat).")
@click.option(
    "--secret-env",
    multiple=True,
    metavar="NAME=SECRET:KEY",
    help="A variable from a key of a Kubernetes Secret in the team's namespace (repeat).",
)
@click.option("--env-from", multiple=True, metavar="SECRET", help="Every key of a Secret.")
@click.option(
    "--preview", is_flag=True, help="Dry run: when and where it would start; stores nothing."
)
@click.option("--wait", "-w", is_flag=True, help="Follow the job until it runs or ends.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between looks with --wait.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@output_options
def submit(
    job_file: str | None,
    env: tuple[str, ...],
    secret_env: tuple[str, ...],
    env_from: tuple[str, ...],
    preview: bool,
    wait: bool,
    interval: float,
    command: tuple[str, ...],
    as_json: bool,
    quiet: bool,
    **fields: Any,
) -> None:
    """Submit a job: flags for the common fields, or -f job.yaml; the command after '--'.

    \b
        gpuportal submit -t vision -Q batch -c min-40gb -g 4 -r 6h \\
            -i registry.example/train:1 --wait -- python train.py --lr 0.1

    Flags override the file's fields. --preview asks the portal what would happen instead.
    """
    body: dict[str, Any] = _job_file(job_file) if job_file else {}
    body.update({k: v for k, v in fields.items() if v is not None})
    if env or secret_env:
        body["env"] = {**body.get("env", {}), **_pairs(env, "--env"), **_secret_refs(secret_env)}
    if env_from:
        body["env_from"] = list(env_from)
    if command:
        body["command"] = list(command)
    missing = [f for f in ("team", "queue", "capability_class", "image") if f not in body]
    if missing:
        flags = {"team": "--team", "queue": "--queue", "capability_class": "--capability"}
        names = [flags.get(f, f"--{f}") for f in missing]
        fail(EXIT["bad_input"], f"missing {', '.join(names)} (or give them in -f job.yaml)")
    api = connect()
    if preview:
        return show_preview(api.post("/api/jobs/preview/", body, safe=True), as_json=as_json)
    job = api.submit("/api/jobs/", body)
    if quiet:
        click.echo(job["id"])
    elif not as_json:
        click.echo(f"Submitted job {job['id']} to queue {job['queue']} ({job['state']}).")
    if wait:
        job = follow(api, job, interval=interval, chatty=not (quiet or as_json))
    if as_json:
        emit_json(job)
    if wait and job["state"] in ("failed", "cancelled"):
        sys.exit(EXIT["ended"])


def show_preview(preview: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        return emit_json(preview)
    cost = preview.get("cost_per_hour")
    price = f" at {cost} {preview.get('currency')}/h" if cost else ""
    if preview["starts_now"]:
        click.echo(f"Would start now on {preview['gpu_class']} ({preview['capacity']}){price}.")
    elif preview.get("estimated_start"):
        click.echo(
            f"Would wait; start at the latest {render.when(preview['estimated_start'])}{price}."
        )
    else:
        click.echo(f"Would wait; start unknown ({preview.get('why_unknown') or 'no estimate'}).")
    for reason in preview.get("reasons", []):
        click.echo(f"  {reason['code']}: {reason['message']}")
        if reason.get("hint"):
            click.echo(f"    hint: {reason['hint']}")
    if preview.get("preempts_own"):
        own = ", ".join(str(i) for i in preview["preempts_own"])
        click.echo(f"Starting it would preempt your own job(s) {own}.")
    alternatives = preview.get("alternatives") or []
    if alternatives:
        click.echo("Sooner elsewhere:")
        rows = [
            [
                a["queue"],
                a["capability"],
                "now" if a["admitted_now"] else render.when(a["starts_at"]),
                a.get("gpu_class"),
                a["preemption"],
                f"{a['cost_per_hour']} {a.get('currency')}/h" if a.get("cost_per_hour") else None,
            ]
            for a in alternatives
        ]
        headers = ["queue", "capability", "starts", "gpu class", "preemption", "cost"]
        click.echo(render.table(headers, rows))
    click.echo("Nothing was submitted (--preview).")


def follow(api: Api, job: dict[str, Any], *, interval: float, chatty: bool) -> dict[str, Any]:
    """Look at the job every ``interval`` seconds until it runs or ends; say each change.
    Ctrl-C stops looking and leaves the job as it is."""
    said = ""
    try:
        while True:
            line = f"job {job['id']}: {render.standing(job)}"
            if job["state"] in ("pending", "admitted"):
                reasons = job.get("pending_reasons") or []
                if reasons:
                    line += f" — {reasons[0]['message']}"
                if job["state"] == "pending":
                    line += f"; start {render.estimate(job)}"
            if chatty and line != said:
                click.echo(line)
                said = line
            if job["state"] in WAIT_UNTIL and not job.get("terminating"):
                return job
            time.sleep(interval)
            job = api.get(f"/api/jobs/{job['id']}/")
    except KeyboardInterrupt:
        stopped_following(job)


def stopped_following(job: dict[str, Any]) -> NoReturn:
    hint = "" if job["state"] in ENDED else f" (gpuportal cancel {job['id']} cancels it)"
    click.echo(f"\nStopped following job {job['id']}; it is left as it was{hint}.", err=True)
    sys.exit(INTERRUPTED)


# --- jobs, show, why ------------------------------------------------------------------------------


@main.command()
@click.option("--all", "-a", "everyone", is_flag=True, help="Your teams' jobs too, not only yours.")
@click.option(
    "--state",
    "-s",
    type=click.Choice(
        ["pending", "admitted", "running", "preempted", "succeeded", "failed", "cancelled"]
    ),
    help="Only jobs in this state.",
)
@click.option("--queue", "-Q", help="Only this queue's jobs.")
@click.option("--team", "-t", help="Only this team's jobs.")
@click.option("--limit", "-l", type=click.IntRange(min=1), default=50, show_default=True)
@output_options
def jobs(
    everyone: bool,
    state: str | None,
    queue: str | None,
    team: str | None,
    limit: int,
    as_json: bool,
    quiet: bool,
) -> None:
    """Your jobs, newest first (--all: your teams' too)."""
    api = connect()
    items = list(
        api.pages(
            "/api/jobs/",
            limit=limit,
            owner=None if everyone else "me",
            state=state,
            queue=queue,
            team=team,
        )
    )
    if as_json:
        return emit_json(items)
    if quiet:
        return emit_ids(j["id"] for j in items)
    rows = [
        [
            j["id"],
            j["name"],
            *([j["owner"]] if everyone else []),
            j["team"],
            j["queue"],
            render.devices(j),
            j["state"] + (" (terminating)" if j.get("terminating") else ""),
            _when_column(j),
        ]
        for j in items
    ]
    headers = ["id", "name", *(["owner"] if everyone else []), "team", "queue", "gpus", "state"]
    click.echo(table_or_none([*headers, "since / start"], rows, "jobs"))


def _when_column(job: dict[str, Any]) -> str:
    if job["state"] == "pending":
        latest = job.get("estimated_start")
        return f"starts by {render.when(latest)}" if latest else "start unknown"
    at = job.get("finished_at") or job.get("started_at") or job.get("submitted_at")
    return render.when(at)


def _job_id(value: str) -> int:
    if not value.isascii() or not value.isdigit():
        fail(EXIT["bad_input"], f"{value!r} is not a job id (a whole number)")
    return int(value)


@main.command()
@click.argument("job_id", metavar="ID")
@output_options
def show(job_id: str, as_json: bool, quiet: bool) -> None:
    """A job: where it stands, why it waits, its estimate and what it has cost so far."""
    api = connect()
    job = api.get(f"/api/jobs/{_job_id(job_id)}/")
    if as_json:
        return emit_json(job)
    if quiet:
        return click.echo(job["id"])
    title = f"Job {job['id']}" + (f" {job['name']}" if job["name"] else "")
    click.echo(f"{title} — {job['owner']}, team {job['team']}")
    rows: list[tuple[str, str]] = [
        ("state", render.standing(job)),
        ("queue", f"{job['queue']}, capability {job['capability_class']}"),
        ("asks", f"{render.devices(job)}, runtime limit {job['runtime_limit']}"),
        ("image", job["image"]),
    ]
    if job["command"] or job["args"]:
        rows.append(("command", " ".join([*job["command"], *job["args"]])))
    for reason in job.get("pending_reasons") or []:
        rows.append(("waits", reason["message"]))
    if job["state"] == "pending":
        rows.append(("start", render.estimate(job)))
    if job.get("gpu_class"):
        rows.append(("runs on", f"{job['gpu_class']} on {', '.join(job['nodes']) or '—'}"))
    if job["attempts"]:
        rows.append(("requeued", f"{job['attempts']} time(s)"))
    if job.get("failure_reason") or job.get("exit_code") is not None:
        parts = [job.get("failure_reason") or "", f"exit code {job['exit_code']}"]
        rows.append(("ended", ", ".join(p for p in parts if p and "None" not in p)))
    cost = job.get("cost_so_far")
    if cost:
        hours = cost["normalized_gpu_hours"]
        sofar = "so far" if cost["running"] else "in all"
        rows.append(
            ("cost", f"{cost['amount']} {cost['currency']} {sofar} ({hours} normalized GPU-hours)")
        )
    else:
        rows.append(
            ("cost", "nothing yet" if not job.get("started_at") else "no rate card prices it")
        )
    rows.append(("submitted", render.when(job["submitted_at"])))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"  {key.ljust(width)}  {value}")
    if job["state"] in ("pending", "admitted") and job.get("pending_reasons"):
        click.echo(f"(gpuportal why {job['id']} gives every reason with its numbers and hint)")


@main.command()
@click.argument("job_id", metavar="ID")
@output_options
def why(job_id: str, as_json: bool, quiet: bool) -> None:
    """Why a job is not running: every reason, with its numbers and what you can do."""
    api = connect()
    job = api.get(f"/api/jobs/{_job_id(job_id)}/")
    reasons = job.get("pending_reasons") or []
    if as_json:
        return emit_json(reasons)
    if quiet:
        return emit_ids(r["code"] for r in reasons)
    if job["state"] not in ("pending", "admitted"):
        click.echo(f"Job {job['id']} is {render.standing(job)}: nothing holds it back.")
        return
    click.echo(f"Job {job['id']} is {render.standing(job)} in queue {job['queue']}.")
    if not reasons:
        click.echo("No reason recorded yet: the next reconcile gives one.")
    for i, reason in enumerate(reasons, start=1):
        click.echo(f"{i}. {reason['code']}: {reason['message']}")
        if reason.get("details"):
            click.echo(f"   numbers: {render.numbers(reason['details'])}")
        if reason.get("hint"):
            click.echo(f"   hint: {reason['hint']}")
    if job["state"] == "pending":
        click.echo(f"Start: {render.estimate(job)}.")


# --- logs -----------------------------------------------------------------------------------------


def new_lines(seen: list[str], now: list[str]) -> list[str]:
    """The lines of ``now`` (a log's last lines) that come after ``seen`` (its earlier last
    lines): the longest end of ``seen`` that ``now`` starts with is what both have."""
    for overlap in range(min(len(seen), len(now)), 0, -1):
        if seen[-overlap:] == now[:overlap]:
            return now[overlap:]
    return now


@main.command()
@click.argument("job_id", metavar="ID")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option(
    "--tail",
    type=click.IntRange(1, 1000),
    default=50,
    show_default=True,
    help="Lines per pod, from the end.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="Seconds between looks with --follow.",
)
@click.option("--json", "as_json", is_flag=True, help="The API's answer, as JSON.")
def logs(job_id: str, follow: bool, tail: int, interval: float, as_json: bool) -> None:
    """The last lines of each of a job's pods' logs (-f: follow until it ends)."""
    api = connect()
    number = _job_id(job_id)
    path = f"/api/jobs/{number}/logs/"
    if as_json:
        return emit_json(api.get(path, tail=tail))
    seen: dict[str, list[str]] = {}
    try:
        while True:
            ended = api.get(f"/api/jobs/{number}/")["state"] in ENDED if follow else True
            pods = api.get(path, tail=tail)["pods"]
            several = len(pods) > 1
            for pod in pods:
                fresh = new_lines(seen.get(pod["pod"], []), pod["lines"])
                seen[pod["pod"]] = pod["lines"]
                for line in fresh:
                    click.echo(f"[{pod['pod']}] {line}" if several else line)
            if not follow and not pods:
                click.echo(f"Job {number} has no pods with logs yet.", err=True)
            if ended:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        click.echo(f"\nStopped following the logs of job {number}; the job goes on.", err=True)
        sys.exit(INTERRUPTED)


# --- cancel ---------------------------------------------------------------------------------------


@main.command()
@click.argument("job_ids", metavar="ID…", nargs=-1, required=True)
@output_options
def cancel(job_ids: tuple[str, ...], as_json: bool, quiet: bool) -> None:
    """Cancel jobs of yours. Each is tried; the exit code is the first failure's."""
    api = connect()
    numbers = [_job_id(value) for value in job_ids]
    cancelled, first_failure = [], EXIT["ok"]
    for number in numbers:
        try:
            job = api.post(f"/api/jobs/{number}/cancel/")
        except ApiError as exc:
            for line in exc.lines:
                click.echo(f"gpuportal: job {number}: {line}", err=True)
            first_failure = first_failure or exc.exit_code
            continue
        cancelled.append(job)
        if quiet:
            click.echo(job["id"])
        elif not as_json:
            stopping = " (its pods are stopping)" if job.get("terminating") else ""
            click.echo(f"Cancelled job {job['id']}{stopping}.")
    if as_json:
        emit_json(cancelled)
    sys.exit(first_failure)


# --- usage ----------------------------------------------------------------------------------------


@main.command()
@click.option("--period", "-p", metavar="YYYY-MM", help="A month (default: this month).")
@click.option("--start", metavar="DATE", help="Start of a range (2026-11-01 or ISO 8601).")
@click.option("--end", metavar="DATE", help="End of the range.")
@click.option(
    "--group-by", metavar="DIMS", help="Comma-separated: team, cost_center, gpu_class, job …"
)
@output_options
def usage(
    period: str | None,
    start: str | None,
    end: str | None,
    group_by: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """GPU-hours and cost of your teams (finance: of all teams), from the chargeback API."""
    api = connect()
    report = api.get("/api/chargeback/", period=period, start=start, end=end, group_by=group_by)
    if as_json:
        return emit_json(report)
    dims = report["group_by"]
    if quiet:
        return emit_ids(" ".join(str(line.get(d, "")) for d in dims) for line in report["lines"])
    span = report["period"] or f"{render.when(report['start'])} – {render.when(report['end'])}"
    closed = "closed" if report["closed"] else "open, provisional"
    click.echo(f"Usage {span} ({closed})")
    rows = [
        [
            *(line.get(d) for d in dims),
            line["gpu_hours"],
            line["normalized_gpu_hours"],
            f"{line['cost']} {line['currency']}" if line.get("cost") is not None else None,
        ]
        for line in report["lines"]
    ]
    click.echo(
        table_or_none([*dims, "gpu-hours", "normalized", "cost"], rows, "usage in this period")
    )
    totals = report["totals"]
    costs = ", ".join(f"{amount} {currency}" for currency, amount in totals["cost"].items())
    click.echo(f"Total: {totals['gpu_hours']} GPU-hours, {costs or 'no cost'}")


def run() -> None:
    """The console script: ``main`` with Ctrl-C outside a follow ending quietly (130)."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `gpuportal jobs | head` ends quietly
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
