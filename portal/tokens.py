"""The token a job's pods use to talk to the portal (checkpoint reports), valid for that job alone.

It is an HMAC of the job id under the portal's secret key: nothing is stored, a retried Job
create carries the same token, and rotating SECRET_KEY revokes every job token at once.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from django.conf import settings

PREFIX = "gpj"


def _digest(job_id: int) -> str:
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"job:{job_id}".encode(), hashlib.sha256).hexdigest()[:40]


def job_token(job_id: int) -> str:
    return f"{PREFIX}_{job_id}_{_digest(job_id)}"


def job_id_of_token(token: str) -> int | None:
    """The job a token belongs to, or None if it is not a valid job token."""
    prefix, _, rest = token.partition("_")
    job_id, _, digest = rest.partition("_")
    if prefix != PREFIX or not re.fullmatch(r"[0-9]{1,18}", job_id):
        return None
    return int(job_id) if hmac.compare_digest(digest, _digest(int(job_id))) else None
