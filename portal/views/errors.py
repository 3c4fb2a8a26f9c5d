"""The portal's error answers: the API's 404 in the API's error shape, and the 500 page,
rendered without the request's context, since whatever failed may be in it."""

from __future__ import annotations

from django.http import HttpResponseServerError, JsonResponse
from django.template import loader
from django.views.defaults import page_not_found

from audit.lib.context import current_request_id

API_PREFIX = "/api/"


def not_found(request, exception=None):
    """Django's handler404. A path under /api/ that no URL pattern matches (``/api/v1/nope/``,
    ``/api/v1/orders/<id>/extra/``) answers the JSON error every API refusal has, as DRF's own
    404s do; any other path gets the portal's 404 page."""
    if request.path_info.startswith(API_PREFIX):
        return JsonResponse(
            {
                "code": "not_found",
                "detail": "No API endpoint has this path; /api/v1/schema/ lists every one.",
            },
            status=404,
        )
    return page_not_found(request, exception)


def server_error(request, template_name: str = "500.html"):
    """Django's own handler500 with the request id on the page, to quote when reporting it.
    No context processors run (no user, no messages): they read the request that just failed."""
    template = loader.get_template(template_name)
    return HttpResponseServerError(template.render({"request_id": current_request_id.get()}))
