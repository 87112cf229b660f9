"""A small HTTP client for the portal processes the fault tests start (urllib, JSON)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


def call(url: str, *, token: str = "", body: Any = None, timeout: float = 30) -> Answer:
    """One request; an HTTP error status is an answer too."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(
                response.status,
                response.headers.get("Content-Type", ""),
                response.read(),
                dict(response.headers),
            )
    except urllib.error.HTTPError as error:
        return Answer(
            error.code, error.headers.get("Content-Type", ""), error.read(), dict(error.headers)
        )
