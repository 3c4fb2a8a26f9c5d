"""Receivers that tell the audit middleware and Celery tasks what they cannot see themselves.

Sign-in and sign-out change ``request.user`` under the middleware's feet, and a failed sign-in
answers 200 with the form; the auth signals mark the request. An exception's class is noted
for the row (never its message, which may quote the input). Celery carries the request id that
caused a task in the task's headers and restores it while the task runs, with the moment the
task began (its rows' "took").
"""

from __future__ import annotations

import sys
import time
from contextvars import Token

from celery.signals import before_task_publish, task_postrun, task_prerun
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.core.signals import got_request_exception
from django.dispatch import receiver

from audit.lib.context import current_request_id, current_task_started, new_request_id

TASK_HEADER = "portal_request_id"
_task_tokens: dict[str, tuple[Token, Token]] = {}


@receiver(user_logged_in, dispatch_uid="audit.login")
def _note_login(sender, request=None, user=None, **kwargs):
    if request is not None:
        request.audit_action = "login"


@receiver(user_login_failed, dispatch_uid="audit.login_failed")
def _note_login_failed(sender, credentials=None, request=None, **kwargs):
    if request is not None:
        request = getattr(request, "_request", request)
        request.audit_action = "login_failed"


@receiver(user_logged_out, dispatch_uid="audit.logout")
def _note_logout(sender, request=None, user=None, **kwargs):
    if request is not None:
        request.audit_action = "logout"
        request.audit_actor = user


@receiver(got_request_exception, dispatch_uid="audit.exception")
def _note_exception(sender, request=None, **kwargs):
    error = sys.exc_info()[1]
    if request is not None and error is not None:
        request.audit_error = f"{type(error).__module__}.{type(error).__qualname__}"


@before_task_publish.connect(dispatch_uid="audit.task_publish")
def _carry_request_id(sender=None, headers=None, **kwargs):
    request_id = current_request_id.get()
    if request_id and headers is not None:
        headers.setdefault(TASK_HEADER, request_id)


@task_prerun.connect(dispatch_uid="audit.task_prerun")
def _restore_request_id(sender=None, task_id=None, task=None, **kwargs):
    # Eager tasks have no message headers but run inside the caller's context already.
    context = getattr(task, "request", None)
    headers = getattr(context, "headers", None) or {}
    carried = getattr(context, TASK_HEADER, None) or headers.get(TASK_HEADER)
    request_id = carried or current_request_id.get() or new_request_id()
    if task_id is not None:
        _task_tokens[task_id] = (
            current_request_id.set(request_id),
            current_task_started.set(time.perf_counter()),
        )


@task_postrun.connect(dispatch_uid="audit.task_postrun")
def _forget_request_id(sender=None, task_id=None, **kwargs):
    tokens = _task_tokens.pop(task_id, None)
    if tokens is not None:
        try:
            current_request_id.reset(tokens[0])
            current_task_started.reset(tokens[1])
        except ValueError:  # set in another context (a thread pool moved the task)
            current_request_id.set(None)
            current_task_started.set(None)
