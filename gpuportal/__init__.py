"""``gpuportal``: GPU Portal's command-line client.

A thin client of the REST API (``/api/``) with a personal token: it imports nothing of the
portal and no Django, so ``pip install`` on a laptop is enough to use it. The portal's rules
stay on the server; the client shows their answers (tables for people, ``--json`` for scripts,
``--quiet`` for ids) and turns them into exit codes scripts can rely on (``EXIT`` in
``gpuportal.api``). See docs/cli.md.
"""
