"""Loaded with ``-p tests.testenv`` (see pyproject.toml) before Django's settings are read.

Tests run with DEBUG off, as production does, so they need a SECRET_KEY; CI and a developer's
environment may set their own.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-not-a-secret")
os.environ.setdefault("STATICFILES_MANIFEST", "false")
os.environ.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,testserver")
# Tests run reconcile cycles themselves; submissions must not leave tasks in the broker.
os.environ.setdefault("RECONCILE_ON_COMMIT", "false")
os.environ.setdefault("NOTIFY_ON_COMMIT", "false")
# The test client and the live server speak plain HTTP; production redirects to HTTPS
# (tests/portal/test_deploy.py checks that setting with production's environment).
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
# Each test starts with an empty cache (tests/conftest.py clears it) and counts only its own
# queries; tests/portal/test_limits.py runs the limits on the database cache and on Redis.
os.environ.setdefault("CACHE_URL", "locmem://")
