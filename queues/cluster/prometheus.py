"""The one reader of a Prometheus-compatible HTTP API (``PROMETHEUS_URL``), for the GPU
utilization NVIDIA's DCGM exporter publishes per pod (``DCGM_FI_DEV_GPU_UTIL`` with ``pod`` and
``namespace`` labels, 0–100).

It speaks Prometheus' documented API: ``GET <url>/api/v1/query?query=…&time=…`` answers
``{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {…},
"value": [<unix time>, "<value>"]}]}}``; an error is ``{"status": "error", "errorType": …,
"error": …}`` with a 4xx or 5xx status. ``PROMETHEUS_URL`` may carry a path prefix
(``--web.route-prefix``), e.g. ``http://prometheus:9090`` or ``http://host/prometheus``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import urllib3
from django.conf import settings

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"


class PrometheusUnavailable(Exception):
    """Prometheus could not be asked or refused the query (the message says which)."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


def _regex_alternatives(values: list[str]) -> str:
    """An anchored alternation of literal names (``=~`` matches the whole value); the names
    are Kubernetes names, so only '.' needs escaping for RE2."""
    return "|".join(v.replace(".", "\\\\.") for v in sorted(set(values)))


def gpu_util_query(
    *, window: timedelta, namespaces: list[str], pods: list[str] | None = None
) -> str:
    """The average GPU utilization of each pod of ``namespaces`` (only ``pods`` when given)
    over ``window`` before the evaluation time, averaged over its GPUs."""
    matchers = [f'namespace=~"{_regex_alternatives(namespaces)}"']
    if pods is not None:
        matchers.append(f'pod=~"{_regex_alternatives(pods)}"')
    seconds = max(int(window.total_seconds()), 1)
    return (
        f"avg by (namespace, pod) (avg_over_time({GPU_UTIL}{{{','.join(matchers)}}}[{seconds}s]))"
    )


class Prometheus:
    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=False
        )

    def query(self, promql: str, *, at: datetime) -> list[Sample]:
        """An instant query evaluated at ``at``: its vector's samples."""
        try:
            response = self.http.request(
                "GET",
                f"{self.url}/api/v1/query",
                fields={"query": promql, "time": f"{at.timestamp():.3f}"},
            )
        except urllib3.exceptions.HTTPError as exc:
            raise PrometheusUnavailable(f"{type(exc).__name__}: {exc}") from exc
        try:
            body = json.loads(response.data)
        except ValueError as exc:
            raise PrometheusUnavailable(f"HTTP {response.status}: the answer is not JSON") from exc
        if response.status != 200 or body.get("status") != "success":
            kind, error = body.get("errorType", ""), body.get("error", "")
            raise PrometheusUnavailable(f"HTTP {response.status}: {kind} {error}".strip())
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise PrometheusUnavailable(f"expected a vector, got {data.get('resultType')!r}")
        try:
            return [
                Sample(labels=dict(item["metric"]), value=float(item["value"][1]))
                for item in data.get("result", [])
            ]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusUnavailable(f"a malformed sample: {exc}") from exc


def prometheus_from_settings() -> Prometheus | None:
    """The configured Prometheus, or None when ``PROMETHEUS_URL`` is unset."""
    if not settings.PROMETHEUS_URL:
        return None
    return Prometheus(settings.PROMETHEUS_URL, timeout=settings.PROMETHEUS_TIMEOUT_SECONDS)
