"""A small Prometheus-compatible query endpoint for the simulated cluster's GPU utilization, as
NVIDIA's DCGM exporter publishes it (``DCGM_FI_DEV_GPU_UTIL`` with ``pod`` and ``namespace``
labels) and a Prometheus that scrapes it answers:

    GET /prometheus/api/v1/query?query=…&time=…
    GET /prometheus/api/v1/query_range?query=…&start=…&end=…&step=…

(so ``PROMETHEUS_URL`` is ``<sim url>/prometheus``). The series themselves are also served as
the DCGM exporter serves them, for a real Prometheus to scrape (``exposition``)::

    GET /dcgm/metrics   DCGM_FI_DEV_GPU_UTIL{gpu, Hostname, namespace, pod} now, text format
 Answers have Prometheus' shape:
``{"status": "success", "data": {"resultType": "vector"|"matrix", "result": […]}}``, and a query
it cannot answer is 400 ``{"status": "error", "errorType": "bad_data", "error": …}``.

The PromQL it understands is the subset the portal (and a person trying it) needs::

    DCGM_FI_DEV_GPU_UTIL{label="v", label=~"re", label!="v"}
    avg_over_time(<selector>[<n>s|m|h|d])
    avg by (namespace, pod) (<either of the above>)
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

from simcluster.cluster import SimCluster

METRIC = "DCGM_FI_DEV_GPU_UTIL"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
_SELECTOR = re.compile(rf"{METRIC}\s*(?:\{{(?P<matchers>[^}}]*)\}})?")
_RANGE = re.compile(
    rf"avg_over_time\(\s*(?P<selector>{METRIC}[^\[]*)\[(?P<n>\d+)(?P<unit>[smhd])\]\s*\)"
)
_AVG_BY = re.compile(r"avg\s+by\s*\((?P<labels>[^)]*)\)\s*\((?P<inner>.*)\)")


class BadQuery(Exception):
    pass


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _matchers(text: str) -> list[tuple[str, str, str]]:
    found = []
    for part in filter(None, (p for p in re.split(r',(?=(?:[^"]*"[^"]*")*[^"]*$)', text))):
        match = _MATCHER.fullmatch(part)
        if match is None:
            raise BadQuery(f"parse error: bad label matcher {part.strip()!r}")
        found.append((match[1], match[2], _unquote(match[3])))
    return found


def _selects(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
        if op == "=~" and re.fullmatch(value, have) is None:
            return False
        if op == "!~" and re.fullmatch(value, have) is not None:
            return False
    return True


def evaluate(cluster: SimCluster, query: str, at: datetime) -> list[tuple[dict[str, str], float]]:
    """The query's instant vector at ``at``."""
    query = query.strip()
    group: list[str] | None = None
    avg = _AVG_BY.fullmatch(query)
    if avg is not None:
        group = [g.strip() for g in avg["labels"].split(",") if g.strip()]
        query = avg["inner"].strip()
    window: float | None = None
    ranged = _RANGE.fullmatch(query)
    if ranged is not None:
        window = int(ranged["n"]) * _UNITS[ranged["unit"]]
        query = ranged["selector"].strip()
    selector = _SELECTOR.fullmatch(query)
    if selector is None:
        raise BadQuery(f"unsupported query: only {METRIC} selectors, avg_over_time and avg by")
    try:
        matchers = _matchers(selector["matchers"] or "")
        series = [
            (labels if window is not None else {"__name__": METRIC, **labels}, value)
            for labels, value in cluster.gpu_utilization(at, window)
            if _selects(labels, matchers)
        ]
    except re.error as exc:
        raise BadQuery(f"invalid regular expression: {exc}") from exc
    if group is None:
        return series
    sums: dict[tuple[str, ...], list[float]] = {}
    for labels, value in series:
        sums.setdefault(tuple(labels.get(g, "") for g in group), []).append(value)
    return [
        ({g: k for g, k in zip(group, key, strict=True) if k}, sum(v) / len(v))
        for key, v in sorted(sums.items())
    ]


def _time(text: str | None, default: datetime, name: str) -> datetime:
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
        except ValueError:
            raise BadQuery(
                f'invalid parameter "{name}": cannot parse {text!r} to a valid timestamp'
            ) from None
    if not math.isfinite(value):
        raise BadQuery(f'invalid parameter "{name}": not a finite timestamp')
    return datetime.fromtimestamp(value, UTC)


def _label_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(cluster: SimCluster) -> str:
    """What NVIDIA's DCGM exporter answers on ``/metrics`` now: each GPU pod's utilization,
    in Prometheus' text format (version 0.0.4)."""
    lines = [
        f"# HELP {METRIC} GPU utilization (in %).",
        f"# TYPE {METRIC} gauge",
    ]
    for labels, value in sorted(
        cluster.gpu_utilization(cluster.now(), None), key=lambda s: sorted(s[0].items())
    ):
        text = ",".join(f'{k}="{_label_text(v)}"' for k, v in sorted(labels.items()))
        lines.append(f"{METRIC}{{{text}}} {_number(value)}")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return repr(round(value, 6))


def answer(cluster: SimCluster, path: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for ``path`` (after ``/prometheus``)."""
    try:
        query = params.get("query")
        if not query:
            raise BadQuery('invalid parameter "query": empty query')
        now = cluster.now()
        if path == "/api/v1/query":
            at = _time(params.get("time"), now, "time")
            result = [
                {"metric": labels, "value": [at.timestamp(), _number(value)]}
                for labels, value in evaluate(cluster, query, at)
            ]
            return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}
        if path == "/api/v1/query_range":
            start = _time(params.get("start"), now, "start")
            end = _time(params.get("end"), now, "end")
            try:
                step = float(params.get("step", ""))
            except ValueError:
                raise BadQuery('invalid parameter "step": cannot parse to a duration') from None
            if step <= 0 or end < start:
                raise BadQuery("end must not be before start, and step must be positive")
            if (end - start).total_seconds() / step > 11_000:
                raise BadQuery("exceeded maximum resolution of 11,000 points per timeseries")
            points: dict[tuple[tuple[str, str], ...], list[list[Any]]] = {}
            t = start.timestamp()
            while t <= end.timestamp() + 1e-9:
                at = datetime.fromtimestamp(t, UTC)
                for labels, value in evaluate(cluster, query, at):
                    points.setdefault(tuple(sorted(labels.items())), []).append([t, _number(value)])
                t += step
            result = [
                {"metric": dict(key), "values": values} for key, values in sorted(points.items())
            ]
            return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return 404, {"status": "error", "errorType": "not_found", "error": f"no endpoint {path}"}
    except BadQuery as exc:
        return 400, {"status": "error", "errorType": "bad_data", "error": str(exc)}
