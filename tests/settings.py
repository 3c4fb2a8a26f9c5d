"""The settings the tests run under: production's, plus what only tests may have.

pytest reads this module (``DJANGO_SETTINGS_MODULE`` in pyproject.toml); a server or worker a
test starts in a subprocess inherits it from the environment pytest-django sets.
"""

import os

# Development settings unless a test says otherwise (production is the default of a server
# started without settings); set before portal.settings reads it, and inherited by the servers
# and workers tests start in subprocesses.
os.environ.setdefault("DJANGO_DEBUG", "1")


# Each xdist worker's own Redis number and var/ folder (tests/parallel.py), set before the
# settings read them.
import tests.parallel  # noqa: F401
from portal.settings import *  # noqa: F403
from portal.settings import MIDDLEWARE

# Last, right before the view, so a forced failure comes after every other middleware ran.
MIDDLEWARE = [*MIDDLEWARE, "tests.faults.FaultInjectionMiddleware"]
# Off unless a test asks for faults (the ``faults`` fixture in tests/audit/conftest.py).
PORTAL_FAULT_INJECTION = False
# Simulated hosts run no agent process unless a test starts them (tests/instances/
# test_job_execution.py): the other job tests speak for the agent through its API.
PORTAL_SIMULATED_AGENTS = False
