"""Settings for the GPU host portal, driven by environment variables: one module per concern
(base: Django and its libraries; limits: the request limits; instances, audit, billing,
operations, sso, webhooks: each app's knobs), all gathered here. A later module extends lists
an earlier one made (the middleware, the beat schedule, logging) and imports what it extends,
so the order here does not matter.
What one app calls of another is not a setting: each app registers it in its
AppConfig.ready() (audit/registry.py).

A server started without settings is a production server: ``DJANGO_DEBUG`` defaults to 0, which
requires a secret key and an audit signing key. Development turns it on explicitly
(``DJANGO_DEBUG=1``, as ``make run`` does); the other defaults need no services (SQLite and a
filesystem broker under ``var/``, the simulated cloud). See ``.env.example`` for every variable.
"""

from portal.settings.audit import *  # noqa: F403
from portal.settings.base import *  # noqa: F403
from portal.settings.billing import *  # noqa: F403
from portal.settings.instances import *  # noqa: F403
from portal.settings.limits import *  # noqa: F403
from portal.settings.operations import *  # noqa: F403
from portal.settings.sso import *  # noqa: F403
from portal.settings.webhooks import *  # noqa: F403
