"""The webhooks pages: register one (its secret shown once), list them, turn one off or on,
rotate its secret, delete it; and one webhook's deliveries, each with a Resend button."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.db.models import Count, Max, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal import permissions
from portal.lib.pages import form_errors, mark_invalid, service_errors
from portal.models import WebhookDelivery, WebhookEvent
from portal.models.webhooks import BUDGET_EVENTS
from portal.services import (
    webhook_create,
    webhook_delete,
    webhook_resend,
    webhook_secret_rotate,
    webhook_update,
)

# Carries a new secret from the POST to the page it redirects to, popped on first display (as
# the tokens page does: stored server-side, never in a cookie, gone on reload).
SECRET_SESSION_KEY = "portal:webhook-secret"  # noqa: S105 - a session key's name
GROUPS = (("order.", "Orders"), ("host.", "Hosts"), ("job.", "Jobs"), ("budget.", "Budget"))
DELIVERIES_SHOWN = 100
D = WebhookDelivery.Status


class WebhookForm(forms.Form):
    """A new webhook: the service checks the URL, the events and who may choose them."""

    project = forms.ChoiceField(error_messages={"required": "Choose the project."})
    url = forms.CharField(max_length=2000, error_messages={"required": "Give the URL to call."})
    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices, error_messages={"required": "Choose at least one event."}
    )
    description = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, projects, **kwargs):
        super().__init__(*args, **kwargs)
        self.projects = {project.slug: project for project in projects}
        self.fields["project"].choices = [(slug, slug) for slug in self.projects]


def _event_groups(allowed: frozenset[str], chosen) -> list[tuple[str, list]]:
    """The events this person may choose, by what they are about, each (value, label, ticked)."""
    chosen = set(chosen or ())
    groups = []
    for prefix, title in GROUPS:
        events = [
            (event.value, event.label, event.value in chosen)
            for event in WebhookEvent
            if event.value.startswith(prefix) and event.value in allowed
        ]
        if events:
            groups.append((title, events))
    return groups


def _hooks(user):
    return (
        permissions.visible_webhooks(user)
        .select_related("project", "created_by")
        .annotate(
            failed=Count("deliveries", filter=Q(deliveries__status=D.FAILED)),
            pending=Count("deliveries", filter=Q(deliveries__status=D.PENDING)),
            last_at=Max("deliveries__created_at"),
        )
        .order_by("project__slug", "id")
    )


@service_errors(back="webhooks")
def webhooks_page(request: HttpRequest) -> HttpResponse:
    """Register, list and manage the webhooks of the caller's projects."""
    user = request.user
    projects = list(permissions.webhook_projects(user).order_by("slug"))
    hooks = _hooks(user)
    if not projects:
        raise Http404  # a researcher who manages nothing has no webhooks to see
    form = WebhookForm(projects=projects)
    status = 200
    if request.method == "POST":
        if "action" in request.POST:
            return _act(request)
        form = WebhookForm(request.POST, projects=projects)
        if form.is_valid():
            with form_errors(form):
                hook, secret = webhook_create(
                    actor=user,
                    project=form.projects[form.cleaned_data["project"]],
                    url=form.cleaned_data["url"],
                    events=form.cleaned_data["events"],
                    description=form.cleaned_data["description"],
                )
                request.session[SECRET_SESSION_KEY] = {"id": hook.pk, "secret": secret}
                messages.success(request, f"Registered {hook.url} for {hook.project.slug}.")
                return redirect("webhooks")
        status = 400
    # Finance may choose budget events only; a manager or admin every one.
    allowed = BUDGET_EVENTS if permissions.is_finance(user) else frozenset(WebhookEvent.values)
    response = render(
        request,
        "portal/webhooks.html",
        {
            "hooks": hooks,
            "form": mark_invalid(form),
            "groups": _event_groups(allowed, form["events"].value()),
            "shown": request.session.pop(SECRET_SESSION_KEY, None),
        },
        status=status,
    )
    # A secret may be on this page once: never let a browser or proxy keep a copy.
    response["Cache-Control"] = "no-store"
    return response


def _act(request: HttpRequest) -> HttpResponse:
    """The list's buttons: turn off or on, rotate the secret, delete."""
    pk = request.POST.get("webhook", "")
    if not pk.isdigit():
        raise Http404
    hook = get_object_or_404(permissions.visible_webhooks(request.user), pk=pk)
    action = request.POST["action"]
    if action in ("off", "on"):
        webhook_update(actor=request.user, webhook=hook, is_active=action == "on")
        messages.success(request, f"Turned {hook.url} {action}.")
    elif action == "rotate":
        hook, secret = webhook_secret_rotate(actor=request.user, webhook=hook)
        request.session[SECRET_SESSION_KEY] = {"id": hook.pk, "secret": secret, "rotated": True}
        messages.success(request, f"New secret for {hook.url}.")
    elif action == "delete":
        webhook_delete(actor=request.user, webhook=hook)
        messages.success(request, f"Deleted {hook.url} and its deliveries.")
    else:
        raise Http404
    return redirect("webhooks")


@service_errors(back=lambda request, pk: f"/webhooks/{pk}/")
def webhook_page(request: HttpRequest, pk: int) -> HttpResponse:
    """One webhook and its newest deliveries; Resend sends one again with the same id."""
    hook = get_object_or_404(_hooks(request.user), pk=pk)
    if request.method == "POST":
        number = request.POST.get("resend", "")
        if not number.isdigit():
            raise Http404
        delivery = get_object_or_404(hook.deliveries, pk=number)
        webhook_resend(actor=request.user, delivery=delivery)
        messages.success(request, f"Sending {delivery.event} {delivery.message_id} again.")
        return redirect("webhook", pk=hook.pk)
    deliveries = hook.deliveries.order_by("-created_at", "-id")[:DELIVERIES_SHOWN]
    return render(
        request,
        "portal/webhook.html",
        {"hook": hook, "deliveries": deliveries, "shown_most": DELIVERIES_SHOWN},
    )
