"""Sending tasks from services. Tasks import services (a task is a thin wrapper around one);
services name the task they send, so neither imports the other in a function body."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial

from celery import current_app
from django.db import transaction

# While set (enqueue_held), the tasks services send are kept here instead of sent.
_held: ContextVar[list[tuple[str, tuple]] | None] = ContextVar("enqueue_held", default=None)


def enqueue(task_name: str, *args) -> None:
    """Send a task (by its registered name) once the transaction commits. robust: a broker
    outage must not turn a committed order into an error answer (the caller would retry and
    order twice); the reconciler enqueues work that sat too long, so a lost send is repaired."""
    held = _held.get()
    if held is not None:
        held.append((task_name, args))
        return
    task = current_app.tasks[task_name]
    transaction.on_commit(partial(task.delay, *args), robust=True)


@contextmanager
def enqueue_held() -> Iterator[list[tuple[str, tuple]]]:
    """Keep the tasks services send, in order, for a caller that does their work itself at a
    clock it drives (the demo's history, played in the past), instead of a worker running them
    later at the real time. Kept at once, not on commit: such a caller runs inside one
    transaction and does the work before it ends."""
    held: list[tuple[str, tuple]] = []
    token = _held.set(held)
    try:
        yield held
    finally:
        _held.reset(token)
