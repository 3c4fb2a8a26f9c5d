"""How a page answers a service's refusal, in one place.

Services raise ``Forbidden`` (not yours to do), other ``PortalError``s (the state of things
refuses it) or Django's ``ValidationError`` (what was sent is wrong). A page answers:

* any refusal, to an htmx request (``HX-Target`` set): the status and the sentence, with
  ``HX-Reswap: none`` (the fragment stays) and a ``portal:error`` event the page shows;
* ``Forbidden``: the 403 page with the service's sentence (``service_errors``);
* anything else, after a POST that redirects: the sentence as an error message on the page it
  goes back to (``service_errors(back=...)``);
* anything else, on a page that shows a form: the sentence on the form, beside the field it
  names (``form_errors(form)``).

Whatever carries it (a 302 back with a message, a form re-shown with 200), every refusal
answered here is noted for the request's audit row, whose outcome is then ``denied``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from audit.lib.context import note_refusal
from portal.lib.errors import Forbidden, PortalError


def forbidden(request: HttpRequest, message: str) -> HttpResponse:
    """A page a caller may see exists but is not theirs to use: 403 with the reason."""
    return render(request, "portal/forbidden.html", {"message": message}, status=403)


def refusal_code(error: ValidationError | PortalError) -> str:
    """The machine-readable code of a refusal, for the audit row (never its sentence, which
    may quote what was typed)."""
    if isinstance(error, PortalError):
        return error.code
    if hasattr(error, "error_dict"):
        return "invalid: " + ", ".join(sorted(error.error_dict))
    return getattr(error, "code", None) or "invalid"


def in_words(error: ValidationError | PortalError) -> str:
    if isinstance(error, PortalError):
        return error.message
    return " ".join(error.messages)


def service_errors(
    back: str | Callable[..., str] | None = None,
    *,
    prefix: Callable[..., str] | None = None,
):
    """Decorate a page view that calls services.

    An htmx request gets the refusal as an event. ``Forbidden`` answers the 403 page. With
    ``back`` (a URL name, or ``back(request, **view_kwargs)`` giving a URL), any other refusal
    becomes an error message, led by ``prefix(**view_kwargs)`` when given, and the browser goes
    back there; without it, the view handles them (``form_errors``)."""

    def decorate(view):
        @wraps(view)
        def page(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except (ValidationError, PortalError) as error:
                note_refusal(refusal_code(error))
                if request.headers.get("HX-Target"):
                    return _htmx_refusal(error)
                if isinstance(error, Forbidden):
                    return forbidden(request, error.message)
                if back is None:
                    raise
                text = in_words(error)
                if prefix is not None:
                    text = f"{prefix(**kwargs)}: {text}"
                messages.error(request, text)
                return redirect(back(request, **kwargs) if callable(back) else back)

        return page

    return decorate


def _htmx_refusal(error: ValidationError | PortalError) -> HttpResponse:
    text = in_words(error)
    response = HttpResponse(text, status=getattr(error, "status", 400))
    response["HX-Reswap"] = "none"
    response["HX-Trigger"] = json.dumps({"portal:error": text})
    return response


# A page's own words for a service's refusal: (field the service named or None, the error with
# its code and params) -> (the form field to show it at or None, the sentence), or None to show
# the service's sentence where the service put it. The API keeps the service's codes and
# sentences; a page may say them the way its labels do.
Words = Callable[[str | None, "ValidationError | PortalError"], "tuple[str | None, str] | None"]


@contextmanager
def form_errors(form: forms.Form, words: Words | None = None) -> Iterator[None]:
    """Put a refusal on the form: a field's problem beside the field, the rest above the form,
    in the page's ``words`` where it has some. ``Forbidden`` is left to ``service_errors``."""
    try:
        yield
    except Forbidden:
        raise
    except ValidationError as error:
        note_refusal(refusal_code(error))
        if hasattr(error, "error_dict"):
            for name, problems in error.error_dict.items():
                for problem in problems:
                    _add(form, words, name, problem, " ".join(problem.messages))
        else:
            for problem in error.error_list:
                _add(form, words, None, problem, " ".join(problem.messages))
    except PortalError as error:
        note_refusal(refusal_code(error))
        _add(form, words, error.field, error, error.message)


def _add(form: forms.Form, words: Words | None, name: str | None, error, text: str) -> None:
    said = words(name, error) if words is not None else None
    if said is not None:
        name, text = said
    form.add_error(name if name in form.fields else None, text)


def mark_invalid(form: forms.Form) -> forms.Form:
    """Give each widget with errors ``aria-invalid`` and ``aria-describedby`` naming the error
    ``portal/_field_errors.html`` renders under it (static/js/forms.js focuses the first)."""
    for name in form.errors:
        if name in form.fields:
            form.fields[name].widget.attrs.update(
                {"aria-invalid": "true", "aria-describedby": f"{form[name].auto_id}-error"}
            )
    return form


def form_problems(form: forms.Form) -> str:
    """A form's errors in one line, field by field, for a message on the page it came from."""
    return "; ".join(
        f"{form.fields[name].label if name in form.fields else 'Form'}: {' '.join(problems)}"
        for name, problems in form.errors.items()
    )
