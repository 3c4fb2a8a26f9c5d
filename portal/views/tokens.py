"""The API tokens page: create one (its secret shown once), list them, revoke one."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from portal.lib.pages import form_errors, mark_invalid, service_errors
from portal.models import ApiToken
from portal.services import token_issue, token_revoke

# The session key that carries a new token's secret from the POST to the page it redirects to.
# The session is stored server-side (django.contrib.sessions' database engine): the secret never
# travels in a cookie, and it is popped on the first display, so a reload shows it no more.
ISSUED_SESSION_KEY = "portal:issued-token"


class TokenForm(forms.Form):
    """A new API token: a name and how many days it lives (token_issue checks both)."""

    name = forms.CharField(
        max_length=100,
        error_messages={
            "required": "Name the token, e.g. 'laptop' or 'CI'.",
            "max_length": "Keep the name to 100 characters.",
        },
    )
    days = forms.IntegerField(
        required=False,
        error_messages={"invalid": "Give the days as a whole number, e.g. 30."},
    )


@service_errors(back="tokens")
def tokens_page(request: HttpRequest) -> HttpResponse:
    """Create, list and revoke personal API tokens. A new token is shown once: the POST
    redirects (a reload creates nothing) and the page pops the secret from the session."""
    form = TokenForm(initial={"days": settings.PORTAL_TOKEN_DEFAULT_DAYS})
    status = 200
    if request.method == "POST":
        if "revoke" in request.POST:
            if not request.POST["revoke"].isdigit():
                raise Http404
            token = get_object_or_404(ApiToken, pk=request.POST["revoke"], user=request.user)
            token_revoke(token=token, actor=request.user)
            messages.success(
                request,
                f"Revoked {token.name} ({token.prefix}…): scripts using it are refused from now "
                "on.",
            )
            return redirect("tokens")
        form = TokenForm(request.POST)
        if form.is_valid():
            days = form.cleaned_data["days"]
            with form_errors(form):
                token, secret = token_issue(
                    user=request.user,
                    name=form.cleaned_data["name"],
                    days=settings.PORTAL_TOKEN_DEFAULT_DAYS if days is None else days,
                )
                request.session[ISSUED_SESSION_KEY] = {"id": token.pk, "secret": secret}
                messages.success(request, f"Created the token {token.name}.")
                return redirect("tokens")
        status = 400
    tokens = ApiToken.objects.filter(user=request.user)
    issued = None
    shown = request.session.pop(ISSUED_SESSION_KEY, None)
    if shown:
        token = tokens.filter(pk=shown["id"]).first()
        issued = {"token": token, "secret": shown["secret"]} if token else None
    response = render(
        request,
        "portal/tokens.html",
        {
            "tokens": tokens,
            "issued": issued,
            "form": mark_invalid(form),
            "now": timezone.now(),
            "max_days": settings.PORTAL_TOKEN_MAX_DAYS,
        },
        status=status,
    )
    # The secret is on this page once: never let a browser or proxy keep a copy.
    response["Cache-Control"] = "no-store"
    return response
