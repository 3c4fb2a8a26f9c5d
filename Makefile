# The two commands: `make run` (the demo, on the simulated cloud) and `make test` (every test).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PORTAL_PORT ?= 8000
export PORTAL_PORT

.PHONY: run test test-fast lint bench install clean lock

# Installs exactly the versions in the lock files (requirements-dev.lock for a checkout,
# requirements.lock in the image); `make lock` refreshes them from pyproject.toml, the image's
# within the checkout's, so the image runs the versions the tests ran.
$(VENV)/.installed: pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.lock
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $@

LOCK := $(VENV)/bin/uv pip compile pyproject.toml --python-version 3.11 --universal --quiet
lock:
	$(VENV)/bin/pip install --quiet uv
	$(LOCK) $(if $(UPGRADE),--upgrade) --extra dev --extra cli -o requirements-dev.lock
	$(LOCK) -c requirements-dev.lock -o requirements.lock

node_modules/.package-lock.json: package-lock.json
	npm ci --no-audit --no-fund

install: $(VENV)/.installed node_modules/.package-lock.json

# The demo and the developer's commands run with debug on; a server started any other way without
# DJANGO_DEBUG is a production one (it then needs DJANGO_SECRET_KEY and PORTAL_AUDIT_SIGNING_KEY).
run: export DJANGO_DEBUG ?= 1
lint: export DJANGO_DEBUG ?= 1
bench: export DJANGO_DEBUG ?= 1

# Web, worker and beat count into one folder so /metrics sums them; emptied at each start. Only
# the processes honcho starts count there: seeding the demo's history submits its orders through
# the same services, and /metrics would open at the seeded totals (195 orders admitted).
METRICS_DIR := $(CURDIR)/var/metrics
run: install
	rm -rf $(METRICS_DIR) && mkdir -p $(METRICS_DIR)
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py seed_demo
	@# The banner process prints the URL and the logins once /health/ says all is up. Ctrl-C
	@# (honcho's 130) is how the demo ends, not an error.
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PROMETHEUS_MULTIPROC_DIR=$(METRICS_DIR) $(VENV)/bin/honcho --procfile Procfile --app-root . start \
		|| [ $$? -eq 130 ]

# The whole suite, in parallel: each pytest-xdist worker has a database, a Redis number and a
# var/ folder of its own (tests/parallel.py). Most of the slow tests wait on a browser, a
# worker or a poll rather than compute, so more workers than cores pay; worksteal evens out
# the few long ones. test-fast is the inner loop: no browser, worker, live-server, fuzz or
# sweep tests (the ones that go over every route, 100,000 audit rows or 60 days of history).
TEST_WORKERS ?= 4
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

test-fast: install
	$(PY) -m pytest -n 2 --dist worksteal -m "not real_clock and not fuzz and not sweep" -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

bench: install
	$(PY) -m tests.bench

clean:
	rm -rf var staticfiles .pytest_cache
