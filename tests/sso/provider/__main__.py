"""``python -m tests.sso.provider PORT``: migrate the provider's own database, then serve it on
127.0.0.1:PORT until stopped (a threaded WSGI server: the portal fetches keys and tokens while
a login is under way)."""

from __future__ import annotations

import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1])
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sso.provider.settings"
    import django
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    server = make_server(
        "127.0.0.1", port, get_wsgi_application(), server_class=_Server, handler_class=_QuietHandler
    )
    print(f"test identity provider on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
