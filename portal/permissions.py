"""Every "may this user ..." question the portal asks, answered in one place.

Views, API permissions, templates, the navigation and services call these; none of them
decides on its own. Each question has a yes/no form for one object and, where a list is shown,
a queryset form (a ``Q`` or a queryset) that gives the same answer for many rows in one query.

The rules, in words:

- An inactive account may do nothing, whatever its role.
- Admins (role admin, or a Django superuser) may do everything but decide their own orders.
- Finance reads every project, its hosts and its costs, sets budgets and reconciles the bill;
  it orders nothing, acts on no host and decides no order.
- A researcher sees the projects they belong to; orders in them; acts on their own hosts, and
  on every host of a project they manage; a manager also decides the project's held orders
  (never their own) and sets its approval policy. A held order may be cancelled by its
  requester and by those who may decide it.

``portal`` sits below ``instances`` and ``billing``: the functions that take a host or an order
read only plain attributes of it (``owner_id``, ``project_id``, ``requester_id``).
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from portal.models import Membership, Project, User
from portal.models.webhooks import BUDGET_EVENTS, Webhook, WebhookEvent


def _signed_in(user) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


# --- who someone is -------------------------------------------------------------------------


def is_admin(user) -> bool:
    """Runs the portal: role admin, or a Django superuser (the role itself is on User)."""
    return _signed_in(user) and user.is_portal_admin


def is_finance(user) -> bool:
    return _signed_in(user) and user.is_finance


def sees_everything(user) -> bool:
    """Admins and finance read every project; researchers read their own."""
    return _signed_in(user) and user.sees_everything


def managed_project_ids(user) -> set[int]:
    """The projects this person manages (empty for finance and inactive accounts)."""
    if not _signed_in(user) or is_finance(user):
        return set()
    return set(
        Membership.objects.filter(user=user, role=Membership.Role.MANAGER).values_list(
            "project_id", flat=True
        )
    )


# --- seeing ---------------------------------------------------------------------------------


def project_rows_q(user, field: str = "project") -> Q | None:
    """A filter for rows that belong to a project (``field`` names the foreign key): None means
    every row, ``Q(pk__in=[])`` none."""
    if not _signed_in(user):
        return Q(pk__in=[])
    if sees_everything(user):
        return None
    return Q(**{f"{field}__in": Membership.objects.filter(user=user).values("project_id")})


def visible(rows: QuerySet, user, field: str = "project") -> QuerySet:
    """The rows of ``rows`` this person may read, by their project."""
    where = project_rows_q(user, field)
    return rows if where is None else rows.filter(where)


def visible_projects(user) -> QuerySet:
    return Project.objects.for_user(user)


def can_see_project(user, project) -> bool:
    if sees_everything(user):
        return True
    return _signed_in(user) and project.memberships.filter(user=user).exists()


def cost_rows_q(user) -> Q | None:
    """Usage and rollup rows (they carry a project and a user) this person may read: everything
    for admins and finance; for a researcher their projects' rows and their own."""
    if not _signed_in(user):
        return Q(pk__in=[])
    if sees_everything(user):
        return None
    mine = Membership.objects.filter(user=user).values("project_id")
    return Q(project_id__in=mine) | Q(user=user)


def sees_spend_overview(user) -> bool:
    """The dashboard leads with spend by project, budgets at risk and the month's trend:
    finance, whose work that is (and who owns no hosts)."""
    return is_finance(user)


def sees_operations_overview(user) -> bool:
    """The dashboard leads with approvals waiting, quota pressure and hosts by state: admins."""
    return is_admin(user)


def can_read_audit_log(user) -> bool:
    """The whole API call log; everyone reads their own activity."""
    return is_admin(user)


# --- ordering and managing ------------------------------------------------------------------


def can_order(user) -> bool:
    """Anyone active but finance may order (in a project they may order in)."""
    return _signed_in(user) and not is_finance(user)


def can_order_in(user, project) -> bool:
    """Members order in their projects; admins in any."""
    if not can_order(user):
        return False
    return is_admin(user) or project.memberships.filter(user=user).exists()


def orderable_projects(user) -> QuerySet:
    if not can_order(user):
        return Project.objects.none()
    if is_admin(user):
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def can_manage(user, project) -> bool:
    """Admins and the project's managers run a project."""
    if is_admin(user):
        return True
    return project.pk in managed_project_ids(user)


def can_set_approval_policy(user, project) -> bool:
    return can_manage(user, project)


def can_set_idle_policy(user, project) -> bool:
    """Who decides when the project's idle hosts are stopped."""
    return can_manage(user, project)


def can_keep_running(user, host) -> bool:
    """Who may hold off a host's idle stop: whoever may stop it."""
    return can_act_on_host(user, host)


def can_set_quotas(user) -> bool:
    return is_admin(user)


def can_set_isolation(user) -> bool:
    """Where a project's hosts run (network, key, tenancy, instance profile): admins only."""
    return is_admin(user)


def can_request_quota(user, project) -> bool:
    """Whoever may order in a project may ask the admins for more of its quota."""
    return can_order_in(user, project)


def quota_admins() -> QuerySet:
    """The people a request for more quota lands with: the active admins."""
    return User.objects.filter(Q(role=User.Role.ADMIN) | Q(is_superuser=True), is_active=True)


def can_act_on_host(user, host, managed: set[int] | None = None) -> bool:
    """Owners act on their hosts, project managers on their project's, admins on all; finance
    reads only. Pass ``managed`` (managed_project_ids) when checking many hosts."""
    if not can_order(user):
        return False
    if is_admin(user) or host.owner_id == user.pk:
        return True
    managed = managed_project_ids(user) if managed is None else managed
    return host.project_id in managed


def can_act_on_job(user, job) -> bool:
    """Who cancels or re-runs a managed job: who may act on its hosts (its owner, the project's
    managers, admins; finance reads only)."""
    return can_act_on_host(user, job)


def can_revoke_token(user, token) -> bool:
    return _signed_in(user) and (token.user_id == user.pk or is_admin(user))


# --- pools ----------------------------------------------------------------------------------


def can_create_pool(user, project) -> bool:
    """A pool is a standing order: whoever may order in the project may create one."""
    return can_order_in(user, project)


def can_change_pool(user, pool, managed: set[int] | None = None) -> bool:
    """Its creator, the project's managers and admins resize, reschedule or delete a pool;
    other members read it. Pass ``managed`` when checking many pools."""
    if not can_order(user):
        return False
    if is_admin(user) or pool.created_by_id == user.pk:
        return True
    managed = managed_project_ids(user) if managed is None else managed
    return pool.project_id in managed


# --- deciding held orders -------------------------------------------------------------------


def deciders_q() -> Q:
    """Who may decide orders at all: active people who are not finance."""
    return Q(is_active=True) & ~Q(role=User.Role.FINANCE, is_superuser=False)


def approvers_of(project) -> QuerySet:
    """Admins and the project's managers: the people asked to decide its held orders."""
    return User.objects.filter(
        deciders_q(),
        Q(role=User.Role.ADMIN)
        | Q(is_superuser=True)
        | Q(memberships__project=project, memberships__role=Membership.Role.MANAGER),
    ).distinct()


def is_approver(user) -> bool:
    """Has an approval inbox: admins and anyone who manages a project."""
    return is_admin(user) or bool(managed_project_ids(user))


def decidable_projects_q(user, field: str = "project") -> Q:
    """Rows (orders) whose project this person may decide for; never their own orders is the
    caller's filter on the requester."""
    if is_admin(user):
        return Q()
    return Q(**{f"{field}__in": list(managed_project_ids(user))})


def can_decide(user, order) -> bool:
    """Admins and the project's managers decide; nobody decides their own order."""
    if not can_order(user) or order.requester_id == user.pk:
        return False
    return is_admin(user) or order.project_id in managed_project_ids(user)


def can_cancel_order(user, order, managed: set[int] | None = None) -> bool:
    """The requester withdraws their own held order; the project's managers and admins may
    cancel anyone's. Finance cancels nothing. Pass ``managed`` when checking many orders."""
    if not can_order(user):
        return False
    if is_admin(user) or order.requester_id == user.pk:
        return True
    managed = managed_project_ids(user) if managed is None else managed
    return order.project_id in managed


# --- money ----------------------------------------------------------------------------------


def can_see_costs_of(user, project) -> bool:
    return can_see_project(user, project)


def can_set_budgets(user) -> bool:
    """Finance and admins set budget amounts and thresholds."""
    return sees_everything(user)


def can_choose_budget_policy(user) -> bool:
    """What happens at 100 % of a budget is the admins' call."""
    return is_admin(user)


def can_reconcile(user) -> bool:
    """Import the cloud bill and compare it with metered usage."""
    return sees_everything(user)


def budget_recipients(project) -> QuerySet:
    """Who hears about a project's budget: its managers and finance, active only."""
    return User.objects.filter(
        Q(memberships__project=project, memberships__role=Membership.Role.MANAGER)
        | Q(role=User.Role.FINANCE),
        is_active=True,
    ).distinct()


# --- webhooks -------------------------------------------------------------------------------


def webhook_events_allowed(user, project) -> frozenset[str]:
    """The events this person may send to a webhook of ``project``: admins and the project's
    managers every event, finance the budget ones (it sets budgets, not hosts), anyone else
    none (they cannot register one)."""
    if can_manage(user, project):
        return frozenset(WebhookEvent.values)
    if is_finance(user):
        return BUDGET_EVENTS
    return frozenset()


def can_manage_webhook(user, webhook) -> bool:
    """Who may change, rotate, resend or delete a webhook: whoever could register it as it
    is (finance only its budget-only webhooks)."""
    allowed = webhook_events_allowed(user, webhook.project)
    return bool(allowed) and set(webhook.events) <= allowed


def visible_webhooks(user) -> QuerySet:
    """The webhooks this person sees: admins all; managers their projects'; finance the
    budget-only ones (those it may manage). Members and strangers none (the API's 404)."""
    if not _signed_in(user):
        return Webhook.objects.none()
    if is_admin(user):
        return Webhook.objects.all()
    if is_finance(user):
        rows = Webhook.objects.values_list("pk", "events")
        return Webhook.objects.filter(
            pk__in=[pk for pk, events in rows if set(events) <= BUDGET_EVENTS]
        )
    return Webhook.objects.filter(project_id__in=managed_project_ids(user))


def webhook_projects(user) -> QuerySet:
    """The projects this person may register webhooks in (for the form's choice)."""
    if is_admin(user) or is_finance(user):
        return Project.objects.filter(is_active=True)
    return Project.objects.filter(pk__in=managed_project_ids(user), is_active=True)


def can_set_sso_rules(user) -> bool:
    """Who maps the identity provider's groups to roles and projects."""
    return is_admin(user)
