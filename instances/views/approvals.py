"""A project's approval policy as its managers set it (admins set every project's on the
Quotas page too): which orders wait for a yes, through approval_policy_set."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from instances.api.approvals import approval_policy_of
from instances.selectors.quotas import quota_choices
from instances.services.approvals import approval_policy_set
from instances.views.quotas import PolicyForm
from portal import permissions
from portal.lib.pages import forbidden, form_errors, mark_invalid, service_errors

REFUSED = "Only admins and the project's managers change its approval policy."


def _back(request: HttpRequest | None = None, *, slug: str) -> str:
    return reverse("approval-policy", args=[slug])


@service_errors(back=_back)
def approval_policy_page(request: HttpRequest, slug: str) -> HttpResponse:
    """A stranger to the project gets 404, a member who does not manage it 403."""
    project = get_object_or_404(permissions.visible_projects(request.user), slug=slug)
    if not permissions.can_set_approval_policy(request.user, project):
        return forbidden(request, REFUSED)
    policy = approval_policy_of(project)
    saved = policy if policy.pk else None
    if request.method == "POST":
        form = PolicyForm(request.POST, choices=quota_choices(), saved=saved)
        if form.is_valid():
            with form_errors(form):
                approval_policy_set(project=project, actor=request.user, **form.cleaned_data)
                messages.success(request, f"Saved the approval policy of {slug}.")
                return redirect(_back(slug=slug))
        return _page(request, project, policy, mark_invalid(form), status=400)
    return _page(request, project, policy, PolicyForm(choices=quota_choices(), saved=saved))


def _page(request, project, policy, form, status=200) -> HttpResponse:
    return render(
        request,
        "portal/approval_policy.html",
        {"project": project, "policy": policy, "form": form},
        status=status,
    )
