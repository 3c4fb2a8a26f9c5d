"""The Quotas page: admins set each project's quota and approval policy; the bars show what is
in use, counted by the instances app through ``PORTAL_QUOTA_USAGE``."""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal import permissions
from portal.models import ApprovalPolicy, Project, Quota, QuotaChange
from portal.pages import forbidden, form_problems, service_errors
from portal.quotas import bars, change_in_words, quota_values_problems, usage_of
from portal.services import approval_policy_set, quota_set


class QuotaForm(forms.Form):
    """Quota limits as an admin types them; empty means no limit."""

    max_gpus = forms.IntegerField(required=False, min_value=0, label="GPUs in total")
    max_instances = forms.IntegerField(required=False, min_value=0, label="Hosts")
    max_lease_hours = forms.IntegerField(required=False, min_value=1, label="Longest lease (h)")
    max_gpus_by_model = forms.CharField(
        required=False,
        label="GPUs per model",
        help_text='e.g. {"H100": 16}',
        widget=forms.TextInput(attrs={"placeholder": '{"H100": 16}'}),
    )
    allowed_instance_types = forms.CharField(
        required=False,
        label="Allowed types",
        help_text="comma-separated; empty allows all",
    )
    allowed_markets = forms.CharField(
        required=False,
        label="Markets per type",
        help_text='e.g. {"p5.48xlarge": ["spot"]}',
        widget=forms.TextInput(attrs={"placeholder": '{"p5.48xlarge": ["spot"]}'}),
    )

    def _json(self, name: str, kind: type):
        raw = self.cleaned_data.get(name) or ""
        if not raw.strip():
            return kind()
        try:
            value = json.loads(raw)
        except ValueError:
            raise ValidationError("This is not valid JSON.") from None
        if not isinstance(value, kind):
            raise ValidationError(f"Give a JSON {'object' if kind is dict else 'list'}.")
        return value

    def clean_max_gpus_by_model(self):
        return self._json("max_gpus_by_model", dict)

    def clean_allowed_markets(self):
        return self._json("allowed_markets", dict)

    def clean_allowed_instance_types(self):
        raw = self.cleaned_data.get("allowed_instance_types") or ""
        return [name.strip() for name in raw.split(",") if name.strip()]


class PolicyForm(forms.Form):
    """Which orders of a project wait for an admin or a manager."""

    gpus_above = forms.IntegerField(
        required=False, min_value=0, label="Approve orders above (GPUs)"
    )
    instance_types = forms.CharField(
        required=False, label="Always approve these types", help_text="comma-separated"
    )
    on_demand_price_above = forms.DecimalField(
        required=False,
        min_value=0,
        max_digits=14,
        decimal_places=6,
        label="Approve on-demand above ($/h)",
    )
    expire_after_days = forms.IntegerField(
        min_value=1, max_value=60, initial=3, label="Expire after (days)"
    )

    def clean_instance_types(self):
        raw = self.cleaned_data.get("instance_types") or ""
        return [name.strip() for name in raw.split(",") if name.strip()]


def _policy_initial(policy: ApprovalPolicy | None) -> dict:
    if policy is None:
        return {}
    return {
        "gpus_above": policy.gpus_above,
        "instance_types": ", ".join(policy.instance_types),
        "on_demand_price_above": policy.on_demand_price_above,
        "expire_after_days": policy.expire_after_days,
    }


def _quota_initial(quota: Quota | None) -> dict:
    if quota is None:
        return {}
    return {
        "max_gpus": quota.max_gpus,
        "max_instances": quota.max_instances,
        "max_lease_hours": quota.max_lease_hours,
        "max_gpus_by_model": json.dumps(quota.max_gpus_by_model) if quota.max_gpus_by_model else "",
        "allowed_instance_types": ", ".join(quota.allowed_instance_types),
        "allowed_markets": json.dumps(quota.allowed_markets) if quota.allowed_markets else "",
    }


def _back_to(request: HttpRequest | None = None, *, slug: str) -> str:
    return reverse("quotas") + f"#q-{slug}"


def quotas_page(request: HttpRequest) -> HttpResponse:
    """Admins set each project's quota; everyone else sees theirs on the dashboard. A fixed
    number of queries however many projects there are."""
    if not permissions.can_set_quotas(request.user):
        return forbidden(request, "Only admins change quotas; yours are on the dashboard.")
    projects = list(Project.objects.filter(is_active=True))
    ids = [project.pk for project in projects]
    recent = QuotaChange.objects.select_related("changed_by").order_by("-changed_at", "-id")
    quotas = {
        quota.project_id: quota
        for quota in Quota.objects.filter(project_id__in=ids, user=None)
        .select_related("updated_by")
        .prefetch_related(Prefetch("changes", queryset=recent[:3], to_attr="recent_changes"))
    }
    policies = {p.project_id: p for p in ApprovalPolicy.objects.filter(project_id__in=ids)}
    used = usage_of((pk, None) for pk in ids)
    rows = []
    for project in projects:
        quota = quotas.get(project.pk)
        rows.append(
            {
                "project": project,
                "form": QuotaForm(initial=_quota_initial(quota), prefix=project.slug),
                "policy_form": PolicyForm(
                    initial=_policy_initial(policies.get(project.pk)),
                    prefix=f"policy-{project.slug}",
                ),
                "bars": bars(quota, used[(project.pk, None)]),
                "quota": quota,
                "changes": [
                    {"change": change, "diff": change_in_words(change)}
                    for change in (quota.recent_changes if quota else [])
                ],
            }
        )
    return render(request, "portal/quotas.html", {"rows": rows})


@require_POST
@service_errors(back=_back_to, prefix=lambda slug: slug)
def quota_save(request: HttpRequest, slug: str) -> HttpResponse:
    if not permissions.can_set_quotas(request.user):
        return forbidden(request, "Only admins change quotas.")
    project = get_object_or_404(Project, slug=slug)
    form = QuotaForm(request.POST, prefix=slug)
    if not form.is_valid():
        raise ValidationError(form_problems(form))
    values, problems = quota_values_problems(form.cleaned_data)
    if problems:
        raise ValidationError(" ".join(problems.values()))
    quota_set(project=project, actor=request.user, **values)
    messages.success(request, f"Saved the quota of {slug}.")
    return redirect(_back_to(slug=slug))


@require_POST
@service_errors(back=_back_to, prefix=lambda slug: slug)
def policy_save(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(permissions.visible_projects(request.user), slug=slug)
    form = PolicyForm(request.POST, prefix=f"policy-{slug}")
    if not form.is_valid():
        raise ValidationError(form_problems(form))
    approval_policy_set(project=project, actor=request.user, **form.cleaned_data)
    messages.success(request, f"Saved the approval policy of {slug}.")
    return redirect(_back_to(slug=slug))
