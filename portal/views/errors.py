"""The 500 page: rendered without the request's context, since whatever failed may be in it."""

from __future__ import annotations

from django.http import HttpResponseServerError
from django.template import loader

from audit.context import current_request_id


def server_error(request, template_name: str = "500.html"):
    """Django's own handler500 with the request id on the page, to quote when reporting it.
    No context processors run (no user, no messages): they read the request that just failed."""
    template = loader.get_template(template_name)
    return HttpResponseServerError(template.render({"request_id": current_request_id.get()}))
