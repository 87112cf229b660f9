"""Every page of the portal, as each kind of person sees it, at a desktop's 1,400 px and a phone's
390 px, in headless Chromium, with real data behind it: three closed months of history, jobs
running, waiting and finished on the simulated cluster, a quota request, a reservation.

Each page is checked for the faults outside testers found by eye (issue 28): a server error or a
console error; a page that scrolls sideways on a phone; a raw ISO instant or a clock with
fractions of a second where a person reads a time; a chart whose title runs into its plot, whose
legend is cut off by its frame, whose time axis ticks in fractions of a second, or that draws bare
axes with nothing on them; a heading spelled like a policy key ("Gpuclasses", "rate_cards"); a
button drawn over what comes before it. Every page the URL configuration serves on GET is visited:
a page added without a place here fails the coverage check. Screenshots of each page go to
``test-results/screenshots/`` for a person to read."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone
from playwright.sync_api import Page

from chargeback.demo import seed_history
from queues.cluster.adapter import Cluster
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit
from queues.models import CapabilityClass, GpuClass, Job, JobState, Queue, Team
from queues.operations.services import quota_request_file
from queues.reconcile.cycle import reconcile_cycle
from tests.browser.conftest import PASSWORD, SCREENSHOTS

pytestmark = pytest.mark.browser
CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"

# URL names that are not pages a person opens: health and metrics for machines, the plotly
# file, the login steps a test takes on its own, POST-only actions, a download, fragments htmx
# swaps into a page (each drawn here inside its page), the API.
NOT_PAGES = {
    "healthz",
    "metrics",
    "plotly-js",
    "login",
    "sso-login",
    "sso-callback",
    "logout",
    "token-revoke",
    "notifications:webhook-secret",
    "team-webhooks:secret",
    "jobs:cancel",
    "jobs:logs",
    "jobs:alternatives",
    "operations:node-return",
    "operations:policy-export",
    "operations:reservation-end",
    "operations:request-approve",
    "operations:request-decline",
    "chargeback:reopen",
    "ops:last-day",
    "home",  # a redirect to the person's landing page, visited as that page
    "api-schema",  # the OpenAPI document, read by the API docs page and by programs
}
ISO_INSTANT = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d")
FRACTIONAL_CLOCK = re.compile(r"\b\d\d:\d\d:\d\d\.\d")
POLICY_KEY_HEADING = re.compile(r"_|^(?:[A-Z][a-z]+)(?:classes|cards|pools)\b")

# Visible text (no <code>, <pre> or form values: an API URL with as_of=… is meant to be copied).
VISIBLE_TEXT = """() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const parts = [];
  while (walker.nextNode()) {
    const node = walker.currentNode, el = node.parentElement;
    if (!el || el.closest('code, pre, script, style, textarea, select, [hidden], .js-plotly-plot')) continue;
    const box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    parts.push(node.textContent);
  }
  return parts.join(' ');
}"""

CHART_FAULTS = """() => {
  const faults = [];
  const overlap = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  for (const chart of document.querySelectorAll('.js-plotly-plot')) {
    const name = chart.id || chart.dataset.figure || 'chart';
    const frame = chart.getBoundingClientRect();
    if (frame.width === 0) continue;  // folded
    const plot = chart.querySelector('.nsewdrag');
    const title = chart.querySelector('.gtitle');
    if (title && plot && title.textContent.trim()) {
      const t = title.getBoundingClientRect(), p = plot.getBoundingClientRect();
      // the y axis' top tick label sits at the plot's top edge: the title must end above it
      if (t.bottom > p.top - 4) faults.push(`${name}: title "${title.textContent}" runs into the plot`);
    }
    const legend = chart.querySelector('.legend');
    if (legend) {
      const l = legend.getBoundingClientRect();
      if (l.width && (l.left < frame.left - 1 || l.right > frame.right + 3 || l.bottom > frame.bottom + 3))
        faults.push(`${name}: legend cut off by the chart's frame ${[l.left,l.right,l.bottom]} ${[frame.left,frame.right,frame.bottom]}`);
    }
    for (const tick of chart.querySelectorAll('.xtick text, .ytick text')) {
      if (/\\d\\d:\\d\\d:\\d\\d\\.\\d/.test(tick.textContent)) {
        faults.push(`${name}: tick "${tick.textContent}" in fractions of a second`);
        break;
      }
    }
    const points = chart.querySelectorAll('.point, .bars path, .scatterlayer path.js-line, .slice');
    const said = chart.querySelector('.annotation-text');
    if (!points.length && !(said && /No data/.test(said.textContent)))
      faults.push(`${name}: bare axes, nothing drawn and no "No data" said`);
    // (rotated labels' boxes overlap while their text does not: only level ones are compared)
    const ticks = [...chart.querySelectorAll('.xtick text')]
      .filter(t => !/rotate/.test(t.getAttribute('transform') || ''))
      .map(t => t.getBoundingClientRect());
    for (let i = 1; i < ticks.length; i++)
      if (ticks[i].width && overlap(ticks[i - 1], ticks[i])) {
        faults.push(`${name}: x tick labels drawn over each other`);
        break;
      }
  }
  return faults;
}"""

LAYOUT_FAULTS = """() => {
  const faults = [];
  const overlap = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const button of document.querySelectorAll('main button, main .button, main input[type=submit]')) {
    const box = button.getBoundingClientRect();
    if (!box.width) continue;
    const before = button.previousElementSibling;
    if (before && before.getBoundingClientRect().width && overlap(before.getBoundingClientRect(), box))
      faults.push(`button "${button.textContent.trim()}" drawn over the ${before.tagName.toLowerCase()} before it`);
  }
  for (const h of document.querySelectorAll('main h1, main h2, main h3')) {
    if (h.getBoundingClientRect().right > window.innerWidth + 1)
      faults.push(`heading "${h.textContent.trim()}" runs off the screen`);
  }
  return faults;
}"""


def submit(owner, *, team, queue, capability, pods=1, gpus=1, seconds=600):
    return job_submit(
        request=JobRequest(
            owner=owner,
            team=Team.objects.get(name=team),
            queue=Queue.objects.get(name=queue),
            capability_class=CapabilityClass.objects.get(name=capability),
            image="registry.example/train:1",
            command=["python", "train.py"],
            pods=pods,
            gpus_per_pod=gpus,
            runtime_limit=timedelta(hours=1),
            checkpoint_interval=timedelta(minutes=30),
            env={"SIM_DURATION_SECONDS": str(seconds)},
            name=f"{queue}-{capability}",
        )
    )


@pytest.fixture
def world(sim_cluster, example_policy, mia, fiona, ada) -> Iterator[dict[str, object]]:
    """The demo's world in small: history, then jobs through the real reconcile."""
    logging.getLogger("queues.reconcile").setLevel(logging.WARNING)
    try:
        seed_history(now=timezone.now(), cluster_file=CLUSTER)
    finally:
        logging.getLogger("queues.reconcile").setLevel(logging.NOTSET)
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))

    def cycle() -> None:
        reconcile_cycle(cluster=adapter, now=sim_cluster.now())

    finished = submit(mia, team="vision", queue="batch", capability="min-40gb", seconds=60)
    for _ in range(4):
        cycle()
        sim_cluster.advance(30)
    running = submit(mia, team="vision", queue="training", capability="bf16-large", pods=2, gpus=8)
    submit(mia, team="nlp", queue="training", capability="bf16-large", gpus=8)
    for _ in range(2):
        cycle()
        sim_cluster.advance(10)
    # vision holds all 16 H100s it may (nominal 8, borrowing 8): this one waits for them, with
    # its reasons and an estimate
    waiting = submit(mia, team="vision", queue="training", capability="bf16-large", pods=2, gpus=8)
    for _ in range(2):
        cycle()
        sim_cluster.advance(10)
    for job in (finished, running, waiting):
        job.refresh_from_db()
    assert (finished.state, running.state, waiting.state) == (
        JobState.SUCCEEDED,
        JobState.RUNNING,
        JobState.PENDING,
    ), "the world is not as the test needs it"
    request = quota_request_file(
        by=mia,
        team=Team.objects.get(name="vision"),
        gpu_class=GpuClass.objects.get(name="h100-80gb"),
        nominal=Decimal(12),
        borrowing_limit=Decimal(4),
        justification="The ViT-H sweep needs 12 H100s at once for a week.",
        now=timezone.now(),
    )
    for user in (mia, fiona, ada):
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
    yield {
        "finished": finished.pk,
        "running": running.pk,
        "waiting": waiting.pk,
        "request": request.pk,
        "reservation": "search-inference",
        "month": timezone.now().strftime("%Y-%m"),
    }
    adapter.close()


def pages(world: dict[str, object]) -> dict[str, list[str]]:
    """Each person's pages: what a member, finance and an admin open."""
    return {
        "mia": [
            "/queues/",
            "/queues/batch/",
            "/jobs/",
            "/jobs/new",
            f"/jobs/{world['running']}/",
            f"/jobs/{world['waiting']}/",
            f"/jobs/{world['finished']}/",
            "/usage/",
            "/tokens/",
            "/settings/notifications/",
            "/quota-requests/",
            "/quota-requests/new",
            f"/quota-requests/{world['request']}/",
            "/api/docs/",
        ],
        "fiona": [
            "/chargeback/",
            "/chargeback/teams/vision/",
            f"/chargeback/jobs/{world['finished']}/?month={world['month']}",
            "/chargeback/close",
            "/usage/",
        ],
        "ada": [
            "/manage/",
            "/manage/quotas/",
            "/manage/quotas/vision/l4/",
            "/manage/maintenance/",
            "/manage/audit/",
            "/manage/policy/",
            "/manage/policy/roles/",
            "/manage/policy/queues/batch/",
            "/manage/policy/queues/new",
            "/manage/reservations/",
            "/manage/reservations/new",
            f"/manage/reservations/{world['reservation']}/",
            "/manage/requests/",
            "/manage/team-webhooks/",
            "/manage/team-webhooks/vision/",
            "/ops/",
        ],
    }


def page_names() -> set[str]:
    """Every URL name the portal serves outside the API and the Django admin."""
    names: set[str] = set()

    def walk(resolver: URLResolver, namespace: str) -> None:
        for entry in resolver.url_patterns:
            if isinstance(entry, URLResolver):
                if entry.app_name in ("admin", "api") or str(entry.pattern).startswith("api/"):
                    continue
                inner = entry.namespace or ""
                walk(entry, f"{namespace}{inner}:" if inner else namespace)
            elif isinstance(entry, URLPattern) and entry.name:
                names.add(f"{namespace}{entry.name}")

    walk(get_resolver(), "")
    return names - NOT_PAGES


def test_every_page_is_in_the_sweep(world):
    visited = {
        resolve(path.split("?")[0]).view_name for paths in pages(world).values() for path in paths
    }

    assert page_names() - visited == set()


def log_in(page: Page, user: str) -> None:
    page.context.clear_cookies()
    page.goto("/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state("load")


@pytest.mark.parametrize("width", [1400, 390])
def test_every_page_reads_well(world, page: Page, width):
    page.set_viewport_size({"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    faults: list[str] = []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for user, paths in pages(world).items():
        log_in(page, user)
        for path in paths:
            errors.clear()
            response = page.goto(path)
            page.wait_for_load_state("networkidle")
            # folded parts open as a person opens them, so their charts draw too
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            page.wait_for_load_state("networkidle")
            page.wait_for_function(
                "[...document.querySelectorAll('[data-figure]')]"
                ".every(e => e.classList.contains('js-plotly-plot'))"
            )
            where = f"{user} {width}px {path}"
            assert response is not None
            if response.status != 200:
                faults.append(f"{where}: status {response.status}")
            faults += [f"{where}: console error {e}" for e in errors]
            sideways = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if sideways > 0:
                faults.append(f"{where}: scrolls sideways by {sideways}px")
            text = page.evaluate(VISIBLE_TEXT)
            faults += [f"{where}: raw instant {m!r}" for m in ISO_INSTANT.findall(text)[:2]]
            faults += [f"{where}: clock {m!r}" for m in FRACTIONAL_CLOCK.findall(text)[:2]]
            for heading in page.locator("main h1, main h2, main h3").all_inner_texts():
                if POLICY_KEY_HEADING.search(heading.strip()):
                    faults.append(f"{where}: heading {heading!r} spelled like a policy key")
            faults += [f"{where}: {f}" for f in page.evaluate(CHART_FAULTS)]
            faults += [f"{where}: {f}" for f in page.evaluate(LAYOUT_FAULTS)]
            # last: a full-page screenshot stretches the viewport, and plotly redraws for it
            shot = re.sub(r"[^a-z0-9]+", "-", f"{width} {user} {path}".lower()).strip("-")
            page.screenshot(path=str(SCREENSHOTS / f"every-page-{shot}.png"), full_page=True)
    assert faults == [], "\n".join(faults)
    assert Job.objects.filter(pk=world["waiting"], state=JobState.PENDING).exists()
