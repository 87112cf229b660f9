"""Where the client finds the portal and its token.

``gpuportal login`` writes ``$XDG_CONFIG_HOME/gpuportal/config.json`` (``~/.config/…`` without
the variable), readable by its owner only (0600, in a 0700 directory). ``GPUPORTAL_URL`` and
``GPUPORTAL_TOKEN`` override what the file says, each on its own.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

URL_VARIABLE = "GPUPORTAL_URL"
TOKEN_VARIABLE = "GPUPORTAL_TOKEN"


class ConfigError(Exception):
    """No usable URL or token: the message says how to get one."""


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuportal" / "config.json"


def normalized_url(url: str) -> str:
    """``url`` without a trailing slash; refused unless it is http(s)://host[…]."""
    text = url.strip().rstrip("/")
    if not text.startswith(("http://", "https://")) or len(text.split("://", 1)[1]) == 0:
        raise ConfigError(f"{url!r} is not a portal URL: give http(s)://host[:port]")
    return text


def credentials_save(*, url: str, token: str) -> Path:
    """Store the URL and token for later commands; returns the file written (mode 0600)."""
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = json.dumps({"url": normalized_url(url), "token": token.strip()}, indent=2) + "\n"
    # Created 0600 before anything is written: the token is never readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(body)
    path.chmod(0o600)  # an older file keeps its mode through O_TRUNC
    return path


def credentials_forget() -> bool:
    """Remove the stored credentials; False when there were none."""
    try:
        config_path().unlink()
    except FileNotFoundError:
        return False
    return True


def credentials_load() -> Credentials:
    """The URL and token: the environment's, else the stored file's."""
    stored: dict[str, str] = {}
    path = config_path()
    if path.exists():
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path} is unreadable ({exc}): run gpuportal login again") from exc
        if isinstance(loaded, dict):
            stored = {k: v for k, v in loaded.items() if isinstance(v, str)}
    url = os.environ.get(URL_VARIABLE) or stored.get("url")
    token = os.environ.get(TOKEN_VARIABLE) or stored.get("token")
    if not url or not token:
        missing = "the portal's URL" if not url else "a token"
        raise ConfigError(
            f"no {missing}: run gpuportal login (or set {URL_VARIABLE} and {TOKEN_VARIABLE})"
        )
    return Credentials(url=normalized_url(url), token=token)
