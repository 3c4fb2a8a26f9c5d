"""The Single sign-on page (admins): the rules that map the identity provider's groups to
roles and projects, and who has signed in through the provider with which groups."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal import permissions
from portal.lib.pages import forbidden, form_errors, mark_invalid, service_errors
from portal.lib.sso import sso_enabled
from portal.models import ExternalIdentity, GroupRule, Project
from portal.services.sso import GROUP_MAX, group_rule_add, group_rule_delete


class RuleForm(forms.Form):
    """A new rule: group_rule_add checks it."""

    group = forms.CharField(max_length=GROUP_MAX, error_messages={"required": "Name the group."})
    gives = forms.ChoiceField(choices=GroupRule.Gives.choices)
    project = forms.ChoiceField(required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.projects = {p.slug: p for p in Project.objects.filter(is_active=True)}
        self.fields["project"].choices = [("", "—")] + [(slug, slug) for slug in self.projects]


@service_errors(back="sso")
def sso_page(request: HttpRequest) -> HttpResponse:
    if not permissions.can_set_sso_rules(request.user):
        return forbidden(request, "Only admins map the identity provider's groups.")
    form = RuleForm()
    status = 200
    if request.method == "POST":
        if "delete" in request.POST:
            if not request.POST["delete"].isdigit():
                raise Http404
            rule = get_object_or_404(GroupRule, pk=request.POST["delete"])
            group_rule_delete(actor=request.user, rule=rule)
            messages.success(request, f"Removed the rule for {rule.group}.")
            return redirect("sso")
        form = RuleForm(request.POST)
        if form.is_valid():
            with form_errors(form):
                rule = group_rule_add(
                    actor=request.user,
                    group=form.cleaned_data["group"],
                    gives=form.cleaned_data["gives"],
                    project=form.projects.get(form.cleaned_data["project"]),
                )
                messages.success(request, f"{rule} from the next sign-in.")
                return redirect("sso")
        status = 400
    return render(
        request,
        "portal/sso.html",
        {
            "form": mark_invalid(form),
            "rules": GroupRule.objects.select_related("project"),
            "identities": ExternalIdentity.objects.select_related("user").order_by(
                "-last_login_at"
            )[:200],
            "enabled": sso_enabled(),
            "provider_name": settings.PORTAL_OIDC_PROVIDER_NAME,
        },
        status=status,
    )
