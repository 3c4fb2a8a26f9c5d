"""The request id of the work in progress, shared by web requests, Celery tasks and commands.

A ``ContextVar`` rather than a thread-local: it follows the work across threads and async code
and is restored on exit, so a task run eagerly inside a request keeps the request's id.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from audit.lib.redaction import redact_text

current_request_id: ContextVar[str | None] = ContextVar("portal_request_id", default=None)

# When the Celery task in progress began (time.perf_counter()), set by the task_prerun signal:
# a task records its row inside the work, so its "took" is how long it had run by then.
current_task_started: ContextVar[float | None] = ContextVar("portal_task_started", default=None)

# A caller may name its own request id so that it can find its call in the log; it must be
# short, printable and not look like a secret (it is stored and echoed back as it is).
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{7,63}")


def new_request_id() -> str:
    return uuid.uuid4().hex


def sane_request_id(value: str | None) -> str | None:
    """The caller's request id when it is safe to store and echo back, else None."""
    if not value or not _SANE_REQUEST_ID.fullmatch(value):
        return None
    if redact_text(value) != value:
        return None
    return value


# A page that answers a refusal with a redirect (the message shown on the page it goes back to)
# or with its form re-shown answers 302 or 200; the request's row must still say it was refused.
# The middleware puts a fresh list here for each request; whoever answers the refusal notes it
# with ``note_refusal`` (portal.lib.pages does, for every page). A list, not a value, so that a
# note made in a copied context (a thread, sync_to_async) reaches the middleware all the same.
current_refusals: ContextVar[list[str] | None] = ContextVar("portal_refusals", default=None)


def note_refusal(code: str) -> None:
    """Mark the request in progress as refused (outcome ``denied``), with the refusal's code.
    Outside a request (a task, a command, a test calling a view directly) it does nothing."""
    refusals = current_refusals.get()
    if refusals is not None:
        refusals.append(code)
