# The two commands: `make run` (the demo, on the simulated cloud) and `make test` (every test).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PORTAL_PORT ?= 8000
export PORTAL_PORT

.PHONY: run test lint bench install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[dev]"
	touch $@

node_modules/.package-lock.json: package-lock.json
	npm ci --no-audit --no-fund

install: $(VENV)/.installed node_modules/.package-lock.json

run: install
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py seed_demo
	@echo ""
	@echo "  GPU Portal: http://127.0.0.1:$(PORTAL_PORT)/   (Ctrl-C stops web, worker and beat)"
	@echo ""
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/honcho --procfile Procfile --app-root . start

test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

bench: install
	$(PY) -m tests.bench

clean:
	rm -rf var staticfiles .pytest_cache
