"""Telling people what happened: their jobs' starts, ends, failures, preemptions and coming drains,
and the decision on their quota requests, by e-mail and webhook (docs/operations.md#notifications).

``events.py`` is the one place events are found (the job timeline, drains, quota decisions),
``preferences.py`` who wants which on which channel, ``delivery.py`` how one message goes out
exactly once per event and channel, ``tasks.py`` the Celery tasks.
"""
