"""The Budgets page: every project's month against its budget, and the form that sets one."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from billing.forms import BudgetForm
from billing.lib.money import dollars
from billing.models import Budget, BudgetAlert
from billing.selectors.budgets import budget_statuses
from billing.services.budgets import budget_set
from portal import permissions
from portal.lib.pages import forbidden, form_errors, service_errors
from portal.models import Membership, Project


def _budget_cards(request: HttpRequest, forms: dict | None = None) -> list[dict]:
    user = request.user
    projects = Project.objects.for_user(user).filter(is_active=True).order_by("slug")
    statuses = budget_statuses(projects)
    alerts: dict[int, list[BudgetAlert]] = {}
    for alert in BudgetAlert.objects.filter(
        project__in=projects, month=statuses[0].month if statuses else None
    ):
        alerts.setdefault(alert.project_id, []).append(alert)
    managers: dict[int, list[str]] = {}
    for project_id, username in Membership.objects.filter(
        project__in=projects, role=Membership.Role.MANAGER
    ).values_list("project_id", "user__username"):
        managers.setdefault(project_id, []).append(username)
    cards = []
    for status in statuses:
        budget = status.budget
        form = (forms or {}).get(status.project.slug) or BudgetForm(
            initial={
                "monthly_amount": budget.monthly_amount if budget else None,
                "thresholds": ", ".join(
                    str(t)
                    for t in (budget.thresholds if budget else settings.PORTAL_BUDGET_THRESHOLDS)
                ),
                "policy": budget.policy if budget else Budget.Policy.NOTIFY,
            },
            prefix=status.project.slug,
        )
        cards.append(
            {
                "status": status,
                "bar": status.bar(),
                "form": form,
                "alerts": sorted(
                    alerts.get(status.project.pk, []), key=lambda a: (a.basis, a.threshold)
                ),
                "managers": managers.get(status.project.pk, []),
                "thresholds": budget.thresholds if budget else [],
            }
        )
    # Projects closest to (or past) their budget first.
    cards.sort(
        key=lambda c: (
            c["status"].budget is None,
            -(c["status"].percent_forecast or 0),
            c["status"].project.slug,
        )
    )
    return cards


def _budget_totals(cards: list[dict]) -> dict:
    with_budget = [c["status"] for c in cards if c["status"].budget is not None]
    amount = sum((s.amount_rs for s in with_budget), 0)
    return {
        "count": len(with_budget),
        "amount": dollars(amount),
        "spent": dollars(sum((s.spent_rs for s in with_budget), 0)),
        "forecast": dollars(sum((s.forecast_rs for s in with_budget), 0)),
        "over": sum(1 for s in with_budget if s.level == "over"),
        "at_risk": sum(1 for s in with_budget if s.level == "high"),
    }


@require_http_methods(["GET", "POST"])
@service_errors()
def budgets(request: HttpRequest) -> HttpResponse:
    """A bar per project (spent, forecast, budget); finance and admins set them here."""
    user = request.user
    can_edit = permissions.can_set_budgets(user)
    status = 200
    forms = {}
    if request.method == "POST":
        if not can_edit:
            return forbidden(request, "Only finance and admins set budgets.")
        slug = request.POST.get("project", "")
        project = Project.objects.for_user(user).filter(slug=slug).first()
        if project is None:
            raise Http404("No such project.")
        form = BudgetForm(request.POST, prefix=slug)
        if form.is_valid():
            data = form.cleaned_data
            with form_errors(form):
                budget_set(
                    project=project,
                    actor=user,
                    monthly_amount=data["monthly_amount"],
                    thresholds=data["thresholds"],
                    policy=(data["policy"] or None)
                    if permissions.can_choose_budget_policy(user)
                    else None,
                )
                if data["monthly_amount"] is None:
                    messages.success(request, f"{project.slug} has no budget now.")
                else:
                    messages.success(
                        request,
                        f"Budget of {project.slug}: ${data['monthly_amount']:,.2f} a month.",
                    )
                return redirect(f"{reverse('budgets')}#{project.slug}")
        forms[slug] = form
        status = 400
    cards = _budget_cards(request, forms)
    context = {
        "cards": cards,
        "totals": _budget_totals(cards),
        "can_edit": can_edit,
        "can_choose_policy": permissions.can_choose_budget_policy(user),
        "policies": Budget.Policy.choices,
        "month": cards[0]["status"].month if cards else timezone.now().date().replace(day=1),
        "default_thresholds": settings.PORTAL_BUDGET_THRESHOLDS,
    }
    return render(request, "billing/budgets.html", context, status=status)
