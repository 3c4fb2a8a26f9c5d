"""Pages for governing use: the dashboard (quota bars), quota editing, the approval inbox."""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from billing.budgets import budget_statuses
from instances import services
from instances.models import Instance, Order
from instances.quotas import quota_catalog_problems, usage
from instances.selectors import orders_to_decide
from portal import permissions
from portal.errors import Forbidden, PortalError
from portal.models import ApprovalPolicy, Membership, Notice, Project, Quota
from portal.services import approval_policy_set, notices_mark_read, quota_set
from portal.views import forbidden


def _bars(quota: Quota | None, used) -> list[dict]:
    """One bar per limit the quota sets (used / limit)."""
    if quota is None:
        return []
    bars = []
    limits = [("GPUs", quota.max_gpus, used.gpus), ("Hosts", quota.max_instances, used.instances)]
    limits += [
        (f"{model} GPUs", limit, used.gpus_by_model[model])
        for model, limit in sorted(quota.max_gpus_by_model.items())
    ]
    for label, limit, in_use in limits:
        if limit is None:
            continue
        percent = (
            100 if limit == 0 and in_use else int(min(100, in_use * 100 / limit)) if limit else 0
        )
        bars.append(
            {
                "label": label,
                "limit": limit,
                "used": in_use,
                "percent": percent,
                "over": in_use > limit,
                "level": "over" if in_use > limit else "high" if percent >= 80 else "ok",
            }
        )
    return bars


def dashboard(request: HttpRequest) -> HttpResponse:
    """My projects at a glance: quota bars, live hosts, orders waiting for approval."""
    user = request.user
    projects = Project.objects.for_user(user).filter(is_active=True)
    quotas = {
        (q.project_id, q.user_id): q
        for q in Quota.objects.filter(project__in=projects).select_related("user")
    }
    roles = dict(Membership.objects.filter(user=user).values_list("project_id", "role"))
    budgets = {status.project.pk: status for status in budget_statuses(projects)}
    cards = []
    for project in projects:
        used = usage(project=project)
        card = {
            "project": project,
            "role": roles.get(project.pk),
            "bars": _bars(quotas.get((project.pk, None)), used),
            "used": used,
            "my_bars": [],
            "budget": budgets[project.pk],
        }
        mine = quotas.get((project.pk, user.pk))
        if mine is not None:
            card["my_bars"] = _bars(mine, usage(project=project, user=user))
        cards.append(card)
    waiting = Order.objects.filter(
        requester=user, status=Order.Status.PENDING_APPROVAL
    ).select_related("instance_type", "project")
    context = {
        "cards": cards,
        "live_hosts": Instance.objects.filter(owner=user, status__in=Instance.LIVE).count(),
        "my_hosts": Instance.objects.filter(owner=user, status__in=Instance.LIVE)
        .select_related("instance_type", "project")
        .order_by("-created_at")[:6],
        "waiting": waiting,
        "inbox": orders_to_decide(user).count() if permissions.can_order(user) else 0,
        "notices": list(Notice.objects.filter(user=user)[:8]),
    }
    response = render(request, "instances/dashboard.html", context)
    # Shown once as new (highlighted above); from now on they are read.
    notices_mark_read(user=user, notice_ids=[notice.pk for notice in context["notices"]])
    return response


def approvals(request: HttpRequest) -> HttpResponse:
    """The approval inbox of managers and admins."""
    if not (
        request.user.is_portal_admin
        or Membership.objects.filter(user=request.user, role=Membership.Role.MANAGER).exists()
    ):
        return forbidden(request, "Only admins and project managers approve orders.")
    pending = (
        orders_to_decide(request.user)
        .select_related("requester", "project", "instance_type", "image")
        .order_by("created_at")
    )
    decided = (
        Order.objects.filter(decided_by__isnull=False)
        .filter(project__in=Project.objects.for_user(request.user))
        .select_related("requester", "project", "instance_type", "decided_by")
        .order_by("-decided_at")[:10]
    )
    return render(request, "instances/approvals.html", {"pending": pending, "decided": decided})


@require_POST
def approval_decide(request: HttpRequest, pk, decision: str) -> HttpResponse:
    order = get_object_or_404(Order.objects.for_user(request.user).distinct(), pk=pk)
    reason = request.POST.get("reason", "")
    try:
        if decision == "approve":
            services.order_approve(order=order, user=request.user, reason=reason)
            messages.success(
                request,
                f"Approved {order.count}× {order.instance_type.name} for "
                f"{order.requester.username}; provisioning has started.",
            )
        elif decision == "reject":
            services.order_reject(order=order, user=request.user, reason=reason)
            messages.success(request, f"Rejected the order of {order.requester.username}.")
        else:
            messages.error(request, "Approve or reject.")
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    except Forbidden as error:
        return forbidden(request, error.message)
    except PortalError as error:
        messages.error(request, error.message)
    return redirect("approvals")


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


def _policy_initial(project: Project) -> dict:
    policy = ApprovalPolicy.objects.filter(project=project).first()
    if policy is None:
        return {}
    return {
        "gpus_above": policy.gpus_above,
        "instance_types": ", ".join(policy.instance_types),
        "on_demand_price_above": policy.on_demand_price_above,
        "expire_after_days": policy.expire_after_days,
    }


@require_POST
def policy_save(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(Project.objects.for_user(request.user), slug=slug)
    form = PolicyForm(request.POST, prefix=f"policy-{slug}")
    if not form.is_valid():
        problems = "; ".join(
            f"{form.fields[f].label}: {' '.join(e)}" for f, e in form.errors.items()
        )
        messages.error(request, f"{slug}: {problems}")
        return redirect(reverse("quotas") + f"#q-{slug}")
    try:
        approval_policy_set(project=project, actor=request.user, **form.cleaned_data)
    except Forbidden as error:
        return forbidden(request, error.message)
    except ValidationError as error:
        messages.error(request, f"{slug}: {' '.join(error.messages)}")
    else:
        messages.success(request, f"Saved the approval policy of {slug}.")
    return redirect(reverse("quotas") + f"#q-{slug}")


LABELS = {
    "max_gpus": "GPUs",
    "max_gpus_by_model": "GPUs per model",
    "max_instances": "hosts",
    "max_lease_hours": "longest lease",
    "allowed_instance_types": "types",
    "allowed_markets": "markets",
}


def _diff(change) -> str:
    """'GPUs 8 → 16, hosts none → 4' for a quota change."""
    parts = []
    for name, label in LABELS.items():
        before, after = change.before.get(name), change.after.get(name)
        if before != after:
            parts.append(f"{label} {_shown(before)} → {_shown(after)}")
    return ", ".join(parts) or "removed"


def _shown(value) -> str:
    return "none" if value in (None, [], {}) else str(value)


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


def quotas_page(request: HttpRequest) -> HttpResponse:
    """Admins set each project's quota; everyone else sees theirs on the dashboard."""
    if not request.user.is_portal_admin:
        return forbidden(request, "Only admins change quotas; yours are on the dashboard.")
    rows = []
    for project in Project.objects.filter(is_active=True):
        quota = Quota.objects.filter(project=project, user=None).first()
        rows.append(
            {
                "project": project,
                "form": QuotaForm(initial=_quota_initial(quota), prefix=project.slug),
                "policy_form": PolicyForm(
                    initial=_policy_initial(project), prefix=f"policy-{project.slug}"
                ),
                "bars": _bars(quota, usage(project=project)),
                "quota": quota,
                "changes": [
                    {"change": change, "diff": _diff(change)}
                    for change in (quota.changes.select_related("changed_by")[:3] if quota else [])
                ],
            }
        )
    return render(request, "instances/quotas.html", {"rows": rows})


@require_POST
def quota_save(request: HttpRequest, slug: str) -> HttpResponse:
    if not request.user.is_portal_admin:
        return forbidden(request, "Only admins change quotas.")
    project = get_object_or_404(Project, slug=slug)
    form = QuotaForm(request.POST, prefix=slug)
    if not form.is_valid():
        problems = "; ".join(
            f"{form.fields[f].label}: {' '.join(e)}" for f, e in form.errors.items()
        )
        messages.error(request, f"{slug}: {problems}")
        return redirect(reverse("quotas") + f"#q-{slug}")
    values, problems = quota_catalog_problems(form.cleaned_data)
    if problems:
        messages.error(request, f"{slug}: {' '.join(problems.values())}")
        return redirect(reverse("quotas") + f"#q-{slug}")
    try:
        quota_set(project=project, actor=request.user, **values)
    except ValidationError as error:
        messages.error(request, f"{slug}: {' '.join(error.messages)}")
    except PortalError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Saved the quota of {slug}.")
    return redirect(reverse("quotas") + f"#q-{slug}")
