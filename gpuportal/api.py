"""The one place the client speaks HTTP: the portal's REST API with a personal token.

Every failure becomes an ``ApiError`` carrying the exit code scripts rely on (``EXIT``) and the
API's own words: its ``detail``, or each refused field with its messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import requests

from gpuportal.config import Credentials

# Exit codes, the client's promise to scripts (docs/cli.md).
EXIT = {
    "ok": 0,
    "ended": 1,  # --wait followed a job that ended failed or cancelled
    "bad_input": 2,
    "refused": 3,
    "not_found": 4,
    "unreachable": 5,
}
TIMEOUT = 30.0  # seconds for one answer (a preview simulates the cluster: a few seconds)
RETRIES = 3  # tries of a request that got no answer or a 503


class ApiError(Exception):
    """A request that did not succeed: ``exit_code``, and the lines to print."""

    def __init__(self, exit_code: int, lines: list[str], status: int | None = None) -> None:
        super().__init__("\n".join(lines))
        self.exit_code = exit_code
        self.lines = lines
        self.status = status


def error_lines(body: Any) -> list[str]:
    """The API's error body as lines: ``detail``, or ``field: message`` for each message
    (nested ones, such as a batch's, joined by dots)."""
    if isinstance(body, dict) and set(body) == {"detail"}:
        return [str(body["detail"])]
    lines: list[str] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            for message in value:
                lines.append(f"{prefix}: {message}" if prefix else message)
        elif isinstance(value, list):
            for i, inner in enumerate(value):
                walk(f"{prefix}.{i}" if prefix else str(i), inner)
        else:
            lines.append(f"{prefix}: {value}" if prefix else str(value))

    walk("", body)
    return [line.replace("non_field_errors: ", "", 1) for line in lines] or ["(no details)"]


def exit_code_of(status: int) -> int:
    if status in (400, 413, 422):
        return EXIT["bad_input"]
    if status == 404:
        return EXIT["not_found"]
    if status in (401, 403, 405, 409, 429):
        return EXIT["refused"]
    return EXIT["unreachable"]  # 5xx: the portal could not answer


class Api:
    """The portal at ``credentials.url``, called with ``credentials.token``."""

    def __init__(self, credentials: Credentials, *, timeout: float = TIMEOUT) -> None:
        self.url = credentials.url
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update(
            {"Authorization": f"Token {credentials.token}", "Accept": "application/json"}
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        retry: bool = True,
    ) -> Any:
        """The decoded JSON answer of a 2xx; ``ApiError`` otherwise. With ``retry`` (reads, and
        submissions, which carry an Idempotency-Key), a request that gets no answer or a 503 is
        tried again, ``RETRIES`` times in all."""
        url = self.url + path
        tries = RETRIES if retry else 1
        for attempt in range(1, tries + 1):
            try:
                response = self.session.request(
                    method,
                    url,
                    params=params,
                    json=body,
                    headers=headers,
                    timeout=self.timeout,
                )
            except requests.RequestException as exc:
                if attempt < tries:
                    continue
                raise ApiError(
                    EXIT["unreachable"], [f"cannot reach the portal at {self.url}: {reason(exc)}"]
                ) from exc
            if response.status_code == 503 and attempt < tries:
                continue
            break
        return self._answer(response)

    def _answer(self, response: requests.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.ok and body is not None:
            return body
        status = response.status_code
        if response.ok:
            lines = [f"the portal answered {status} without JSON: is {self.url} GPU Portal?"]
            raise ApiError(EXIT["unreachable"], lines, status)
        if body is None:
            lines = [f"the portal answered {status} {response.reason}"]
        else:
            lines = error_lines(body)
        if status == 401:
            lines.append("(your token was refused: create one on /tokens/ and run gpuportal login)")
        elif status == 429 and response.headers.get("Retry-After"):
            lines.append(f"(try again in {response.headers['Retry-After']} seconds)")
        raise ApiError(exit_code_of(status), lines, status)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None, *, safe: bool = False) -> Any:
        """POST ``body``; ``safe``: it changes nothing (a preview) and may be sent again."""
        return self.request("POST", path, body=body, retry=safe)

    def submit(self, path: str, body: Any) -> Any:
        """POST a submission with a fresh Idempotency-Key, so that sending it again after a
        lost answer stores nothing new."""
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        return self.request("POST", path, body=body, headers=headers, retry=True)

    def pages(self, path: str, *, limit: int | None = None, **params: Any) -> Iterator[Any]:
        """Every item of a paginated list, page after page (at most ``limit``)."""
        page, seen = 1, 0
        while True:
            answer = self.get(path, page=page, page_size=100, **params)
            for item in answer["results"]:
                if limit is not None and seen >= limit:
                    return
                seen += 1
                yield item
            if not answer.get("next"):
                return
            page += 1


def reason(exc: requests.RequestException) -> str:
    """A connection failure in a few words, not a traceback."""
    if isinstance(exc, requests.Timeout):
        return "no answer in time"
    if isinstance(exc, requests.ConnectionError):
        return "connection refused or host unknown"
    return exc.__class__.__name__
