"""Sending tasks from services. Tasks import services (a task is a thin wrapper around one);
services name the task they send, so neither imports the other in a function body."""

from __future__ import annotations

from functools import partial

from celery import current_app
from django.db import transaction


def enqueue(task_name: str, *args) -> None:
    """Send a task (by its registered name) once the transaction commits. robust: a broker
    outage must not turn a committed order into an error answer (the caller would retry and
    order twice); the reconciler enqueues work that sat too long, so a lost send is repaired."""
    task = current_app.tasks[task_name]
    transaction.on_commit(partial(task.delay, *args), robust=True)
