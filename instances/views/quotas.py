"""The Quotas page: admins set each project's quota and approval policy; the bars show what is
in use, counted from live hosts (instances.selectors.quotas). Asking for more quota: a member's
request page, and the admins' grant or decline on the Quotas page (quota_request_open,
quota_request_decide)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from instances.forms import TypesField, gpu_limits_field, markets_field
from instances.models import ApprovalPolicy, Quota, QuotaChange, QuotaRequest
from instances.selectors.quotas import (
    QuotaChoices,
    bars,
    change_in_words,
    quota_choices,
    usage_of,
)
from instances.services.approvals import approval_policy_set
from instances.services.quotas import (
    QUOTA_LIMITS_LEAST,
    QUOTA_REQUEST_MOST_GPUS,
    quota_limit_rule,
    quota_request_decide,
    quota_request_open,
    quota_set,
)
from portal import permissions
from portal.lib.pages import forbidden, form_errors, mark_invalid, service_errors
from portal.models import Project


def _limit_field(name: str, *, label: str) -> forms.IntegerField:
    return forms.IntegerField(
        required=False,
        label=label,
        widget=forms.NumberInput(attrs={"min": QUOTA_LIMITS_LEAST[name]}),
        error_messages={"invalid": quota_limit_rule(name)},
    )


class QuotaForm(forms.Form):
    """Quota limits as an admin sets them; empty means no limit. GPUs per model and markets
    per type are rows of selects offering the catalog's names (instances.forms)."""

    # What a counted limit may be is quota_set's to say (quota_limit_rule); the form only
    # parses a number, and the browser is told the least.
    max_gpus = _limit_field("max_gpus", label="GPUs in total")
    max_instances = _limit_field("max_instances", label="Hosts")
    max_lease_hours = _limit_field("max_lease_hours", label="Longest lease (h)")
    allowed_instance_types = TypesField(
        label="Allowed types", none="All types", help_text="none ticked allows every type"
    )
    max_gpus_by_model = gpu_limits_field(label="GPUs per model")
    allowed_markets = markets_field(
        label="Markets per type", help_text="a type without a row may run on-demand and spot"
    )

    def __init__(self, *args, choices: QuotaChoices, saved: Quota | None = None, **kwargs):
        super().__init__(*args, initial=_quota_initial(saved), **kwargs)
        self.fields["max_gpus_by_model"].set_keys(choices.gpu_models)
        self.fields["allowed_markets"].set_keys(choices.instance_types)
        kept = saved.allowed_instance_types if saved else []
        self.fields["allowed_instance_types"].set_keys(choices.instance_types, kept)


class PolicyForm(forms.Form):
    """Which orders of a project wait for an admin or a manager."""

    gpus_above = forms.IntegerField(
        required=False, min_value=0, label="Require approval above (GPUs)"
    )
    instance_types = TypesField(
        label="Always require approval for",
        none="No type",
        help_text="orders for the ticked types always wait for a yes",
    )
    on_demand_price_above = forms.DecimalField(
        required=False,
        min_value=0,
        max_digits=14,
        decimal_places=6,
        label="Require approval for on-demand above ($/h)",
    )
    expire_after_days = forms.IntegerField(
        min_value=1, max_value=60, initial=3, label="Expire after (days)"
    )

    def __init__(self, *args, choices: QuotaChoices, saved: ApprovalPolicy | None = None, **kwargs):
        super().__init__(*args, initial=_policy_initial(saved), **kwargs)
        kept = saved.instance_types if saved else []
        self.fields["instance_types"].set_keys(choices.instance_types, kept)


def _policy_initial(policy: ApprovalPolicy | None) -> dict:
    if policy is None:
        return {}
    return {
        "gpus_above": policy.gpus_above,
        "instance_types": list(policy.instance_types),
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
        "max_gpus_by_model": quota.max_gpus_by_model,
        "allowed_instance_types": list(quota.allowed_instance_types),
        "allowed_markets": quota.allowed_markets,
    }


def _back_to(request: HttpRequest | None = None, *, slug: str) -> str:
    return reverse("quotas") + f"#q-{slug}"


def _card_messages(request: HttpRequest) -> tuple[dict[str, list], list]:
    """Messages tagged for a project's card (``card:<slug>``), by slug, and the rest: a save
    answers at the card it saved, not at the top of a long page."""
    by_card: dict[str, list] = {}
    rest = []
    for message in messages.get_messages(request):
        tag = next((t for t in message.extra_tags.split() if t.startswith("card:")), None)
        if tag:
            by_card.setdefault(tag.removeprefix("card:"), []).append(message)
        else:
            rest.append(message)
    return by_card, rest


def _saved(request: HttpRequest, slug: str, text: str) -> HttpResponse:
    messages.success(request, text, extra_tags=f"card:{slug}")
    return redirect(_back_to(slug=slug))


def quotas_page(
    request: HttpRequest, *, bound: tuple[str, forms.Form] | None = None, status: int = 200
) -> HttpResponse:
    """Admins set each project's quota; everyone else sees theirs on the dashboard. A fixed
    number of queries however many projects there are. ``bound`` is a form sent back with its
    problems (slug, form): it replaces that card's form, with what was typed kept."""
    if not permissions.can_set_quotas(request.user):
        return forbidden(request, "Only admins change quotas; yours are on the dashboard.")
    choices = quota_choices()
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
    asks: dict[int, list[QuotaRequest]] = {}
    for ask in QuotaRequest.objects.filter(
        project_id__in=ids, status=QuotaRequest.Status.OPEN
    ).select_related("requester"):
        asks.setdefault(ask.project_id, []).append(ask)
    by_card, rest = _card_messages(request)
    rows = []
    for project in projects:
        quota = quotas.get(project.pk)
        form = QuotaForm(prefix=project.slug, choices=choices, saved=quota)
        policy_form = PolicyForm(
            prefix=f"policy-{project.slug}", choices=choices, saved=policies.get(project.pk)
        )
        if bound is not None and bound[0] == project.slug:
            if isinstance(bound[1], QuotaForm):
                form = bound[1]
            else:
                policy_form = bound[1]
        rows.append(
            {
                "project": project,
                "form": form,
                "policy_form": policy_form,
                "messages": by_card.get(project.slug, []),
                "bars": bars(quota, used[(project.pk, None)]),
                "quota": quota,
                "requests": asks.get(project.pk, []),
                "changes": [
                    {"change": change, "diff": change_in_words(change)}
                    for change in (quota.recent_changes if quota else [])
                ],
            }
        )
    context = {"rows": rows, "messages": rest}
    return render(request, "portal/quotas.html", context, status=status)


@require_POST
@service_errors()
def quota_save(request: HttpRequest, slug: str) -> HttpResponse:
    """Save one project's quota. A refusal shows the page again with the card's form as it
    was sent, each problem beside its field (400)."""
    if not permissions.can_set_quotas(request.user):
        return forbidden(request, "Only admins change quotas.")
    project = get_object_or_404(Project, slug=slug)
    saved = Quota.objects.filter(project=project, user=None).first()
    form = QuotaForm(request.POST, prefix=slug, choices=quota_choices(), saved=saved)
    if form.is_valid():
        with form_errors(form):
            quota_set(project=project, actor=request.user, **form.cleaned_data)
    if form.errors:
        return quotas_page(request, bound=(slug, form), status=400)
    return _saved(request, slug, f"Saved the quota of {project.name}.")


@require_POST
@service_errors()
def policy_save(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(permissions.visible_projects(request.user), slug=slug)
    saved = ApprovalPolicy.objects.filter(project=project).first()
    form = PolicyForm(request.POST, prefix=f"policy-{slug}", choices=quota_choices(), saved=saved)
    if form.is_valid():
        with form_errors(form):
            approval_policy_set(project=project, actor=request.user, **form.cleaned_data)
    if form.errors:
        return quotas_page(request, bound=(slug, form), status=400)
    return _saved(request, slug, f"Saved the approval policy of {project.name}.")


# --- requests for more quota ------------------------------------------------------------------


class QuotaRequestForm(forms.Form):
    gpus = forms.IntegerField(
        min_value=1,
        max_value=QUOTA_REQUEST_MOST_GPUS,
        label="More GPUs",
        error_messages={
            "required": "Say how many more GPUs, e.g. 8.",
            "invalid": "Give the number of GPUs as a whole number, e.g. 8.",
            "min_value": f"Ask for 1 to {QUOTA_REQUEST_MOST_GPUS} more GPUs.",
            "max_value": f"Ask for 1 to {QUOTA_REQUEST_MOST_GPUS} more GPUs.",
        },
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=2000,
        label="What they are for",
        error_messages={"required": "Say what the GPUs are for, so the admins can decide."},
    )


@service_errors()
def quota_request_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Ask the admins for more GPUs in one project (``?gpus=`` prefills the number, as the
    order page does with what its order lacks)."""
    project = get_object_or_404(permissions.visible_projects(request.user), slug=slug)
    if not permissions.can_request_quota(request.user, project):
        return forbidden(request, f"Only members of {project.slug} ask for more of its quota.")
    wanted = request.GET.get("gpus", "")
    initial = {"gpus": int(wanted)} if wanted.isdigit() and int(wanted) > 0 else {}
    form = QuotaRequestForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        with form_errors(form):
            quota_request_open(
                requester=request.user,
                project=project,
                gpus=form.cleaned_data["gpus"],
                reason=form.cleaned_data["reason"],
            )
            messages.success(
                request,
                f"Asked the admins for {form.cleaned_data['gpus']} more GPUs in {project.slug}; "
                "you will get a notice when they decide.",
            )
            return redirect("dashboard")
    quota = project.quotas.filter(user=None).first()
    context = {
        "project": project,
        "raisable": quota is not None and quota.raisable,
        "form": mark_invalid(form),
        "bars": bars(quota, usage_of([(project.pk, None)])[(project.pk, None)]),
        "mine": QuotaRequest.objects.for_user(request.user).filter(project=project)[:5],
    }
    status = 400 if request.method == "POST" else 200
    return render(request, "portal/quota_request.html", context, status=status)


@require_POST
@service_errors(back=lambda request, **kwargs: reverse("quotas"))
def quota_request_decide_page(request: HttpRequest, pk: int, decision: str) -> HttpResponse:
    """An admin grants or declines a request from its project's card on the Quotas page."""
    if not permissions.can_set_quotas(request.user):
        return forbidden(request, "Only admins decide requests for more quota.")
    ask = get_object_or_404(QuotaRequest.objects.for_user(request.user), pk=pk)
    if decision not in ("grant", "decline"):
        return forbidden(request, "Grant or decline a request; nothing else.")
    ask = quota_request_decide(
        quota_request=ask,
        actor=request.user,
        grant=decision == "grant",
        answer=request.POST.get("answer", ""),
    )
    project: Project = ask.project
    messages.success(
        request,
        f"{ask.get_status_display()} {ask.requester.username}'s request for {ask.gpus} GPUs. "
        f"{ask.answer}",
        extra_tags=f"card:{project.slug}",
    )
    return redirect(reverse("quotas") + f"#q-{project.slug}")
