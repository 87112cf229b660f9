"""Real servers for notifications to reach: an SMTP server (aiosmtpd) and an HTTP receiver, each
on a free port of this machine, started and stopped by the fixtures; the reconcile against the
simulated cluster, and the people who may hear (or must not hear) of a job."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model
from django.utils import timezone

from queues.cluster.adapter import Cluster
from queues.notifications.events import notifications_collect
from queues.reconcile.cycle import reconcile_cycle


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Inbox:
    """What the SMTP server accepted. While ``hold`` is set it keeps each message's DATA
    waiting (the sender sits mid-send); a message whose sender went away meanwhile is dropped,
    as a real server drops an unfinished transaction."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.hold = threading.Event()
        self.holding = threading.Event()

    async def handle_DATA(self, server, session, envelope) -> str:
        while self.hold.is_set():
            self.holding.set()
            await asyncio.sleep(0.05)
        transport = server.transport
        if transport is None or transport.is_closing():
            return "421 sender gone"
        message = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        self.messages.append(message)
        return "250 OK"


@dataclass
class SmtpServer:
    host: str
    port: int
    inbox: Inbox
    controller: Controller

    @property
    def messages(self) -> list[EmailMessage]:
        return self.inbox.messages


@pytest.fixture
def smtp_server(settings) -> Iterator[SmtpServer]:
    """An SMTP server on a free port, and the settings that send to it."""
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_TIMEOUT = 10
    yield SmtpServer("127.0.0.1", port, inbox, controller)
    inbox.hold.clear()
    controller.stop()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    status: int = 200


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """An HTTP server on a free port that records every POST and answers ``status``."""
    port = free_port()
    got = Receiver(url=f"http://127.0.0.1:{port}/hook")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.requests.append(Received(self.path, dict(self.headers.items()), body))
            self.send_response(got.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield got
    server.shutdown()
    server.server_close()


@pytest.fixture
def cycle(sim_cluster, example_policy):
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))

    def run():
        return reconcile_cycle(cluster=adapter, now=sim_cluster.now())

    yield run
    adapter.close()


@pytest.fixture
def people(mia, sara, outsider):
    """Everybody with an address: mia (vision, nlp), victor (vision), sara (search), outsider."""
    victor = get_user_model().objects.get(username="victor")
    for user in (mia, victor, sara, outsider):
        user.email = f"{user.username}@example.org"
        user.save(update_fields=["email"])
    notifications_collect(now=timezone.now())  # the collector starts from here
    return {"mia": mia, "victor": victor, "sara": sara, "outsider": outsider}
