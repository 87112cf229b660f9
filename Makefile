# GPU Portal — two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test test-slow lint format bench venv clean chromium ldap-build-deps slapd prometheus

venv: $(STAMP)

# Installs exactly the versions in constraints.txt (the lock), then the project in editable mode
# with LDAP login (the ldap extra) and the development tools.
$(STAMP): pyproject.toml constraints.txt | ldap-build-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[ldap,dev]'
	touch $(STAMP)

# python-ldap (under django-auth-ldap) has no wheel: pip compiles it against OpenLDAP's and
# Cyrus SASL's headers (and Python's own). Install Debian's packages when missing (as root),
# before pip needs them.
LDAP_BUILD_DEPS := gcc libldap2-dev libsasl2-dev
ldap-build-deps:
	@missing=$$(for p in $(LDAP_BUILD_DEPS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
		| grep -q 'install ok installed' || echo $$p; done); \
	$(PYTHON) -c "import os, sys, sysconfig; \
		sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
		|| missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
		echo "installing $$missing to build python-ldap"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

# The whole product on the embedded default: SQLite, a server-less broker under var/, the
# simulated cluster at real speed (demo jobs last minutes, so waits, estimates and costs are
# true), a Celery worker with beat, the web server and a load generator that keeps queues busy.
# Each run starts from fresh demo data: the simulated cluster keeps nothing between runs, so
# jobs a previous run left on it would only end "deleted outside the portal". (A DATABASE_URL
# of your own is never touched.)
demo: export DEBUG ?= true
demo: $(STAMP)
	@if [ -z "$$DATABASE_URL" ]; then rm -f var/portal.sqlite3 var/portal.sqlite3-wal var/portal.sqlite3-shm; fi
	$(PY) manage.py migrate --noinput
	$(PY) manage.py apply_policy examples/policy.yaml --summary
	$(PY) manage.py apply_policy examples/policy-elastic.yaml --summary
	$(PY) manage.py seed_demo --jobs
	$(PY) manage.py rundemo --addr $(HOST):$(PORT)

test: $(STAMP) chromium slapd prometheus
	$(PY) -m pytest $(PYTEST_ARGS)

# The admission engine's properties with the ``slow`` hypothesis profile: at least 2,000
# examples each instead of 200 (CI runs the normal profile). Tens of minutes on 2 cores.
test-slow: $(STAMP)
	$(PY) -m pytest --hypothesis-profile=slow tests/queues/admission $(PYTEST_ARGS)

# The monitoring test starts Debian's Prometheus of its own (and checks the rules with its
# promtool); install it when missing (as root). The package's own service is not used.
prometheus:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
		echo "installing prometheus for the monitoring test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# The browser tests drive Debian's chromium package; install it when missing (as root).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The LDAP login tests start Debian's slapd of their own (and load it with ldapadd); install
# both when missing (as root). Neither starts a service by itself.
slapd:
	@test -x /usr/sbin/slapd && command -v ldapadd >/dev/null 2>&1 || { \
		echo "installing slapd and ldap-utils for the LDAP login tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slapd ldap-utils >/dev/null; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=true $(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) var
