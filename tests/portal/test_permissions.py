"""Every "may this user ..." answer, persona by persona, written out by hand.

The table is the specification: a change to portal/permissions.py that changes an answer
must change a row here, where a reviewer sees it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.contrib.auth.models import AnonymousUser

from instances.models import Order
from instances.selectors.orders import orders_to_decide
from portal import permissions
from portal.models import Membership, Project, User
from portal.services import membership_set, project_upsert, user_upsert

PERSONAS = ["anon", "alice", "mia", "carol", "ada", "root", "fin", "ex", "exmgr"]

# alice: member of vision-lab; mia: manager of vision-lab; carol: member of nlp-lab;
# ada: admin; root: a Django superuser whose role says researcher; fin: finance;
# ex: an admin whose account is deactivated; exmgr: a deactivated manager of vision-lab.
TABLE = """
question                           anon alice mia carol ada root fin ex exmgr
see vision-lab                      N    Y    Y    N    Y   Y    Y   N   N
see nlp-lab                         N    N    N    Y    Y   Y    Y   N   N
see costs of nlp-lab                N    N    N    Y    Y   Y    Y   N   N
order at all                        N    Y    Y    Y    Y   Y    N   N   N
order in vision-lab                 N    Y    Y    N    Y   Y    N   N   N
manage vision-lab                   N    N    Y    N    Y   Y    N   N   N
set vision-lab's approval policy    N    N    Y    N    Y   Y    N   N   N
set vision-lab's idle stop          N    N    Y    N    Y   Y    N   N   N
keep alice's host running           N    Y    Y    N    Y   Y    N   N   N
set quotas                          N    N    N    N    Y   Y    N   N   N
act on alice's host in vision-lab   N    Y    Y    N    Y   Y    N   N   N
act on carol's host in nlp-lab      N    N    N    Y    Y   Y    N   N   N
decide alice's order in vision-lab  N    N    Y    N    Y   Y    N   N   N
decide mia's order in vision-lab    N    N    N    N    Y   Y    N   N   N
decide carol's order in nlp-lab     N    N    N    N    Y   Y    N   N   N
cancel alice's held order           N    Y    Y    N    Y   Y    N   N   N
cancel mia's held order             N    N    Y    N    Y   Y    N   N   N
cancel carol's held order           N    N    N    Y    Y   Y    N   N   N
have an approval inbox              N    N    Y    N    Y   Y    N   N   N
set budgets                         N    N    N    N    Y   Y    Y   N   N
choose what a budget does at 100%   N    N    N    N    Y   Y    N   N   N
reconcile the cloud bill            N    N    N    N    Y   Y    Y   N   N
read the whole audit log            N    N    N    N    Y   Y    N   N   N
have audit.view_auditevent          N    N    N    N    Y   Y    N   N   N
revoke alice's token                N    Y    N    N    Y   Y    N   N   N
"""


def _table() -> dict[tuple[str, str], bool]:
    answers = {}
    for line in TABLE.strip().splitlines()[1:]:
        words = line.split()
        cells = words[-len(PERSONAS) :]
        question = " ".join(words[: -len(PERSONAS)])
        for persona, cell in zip(PERSONAS, cells, strict=True):
            answers[(question, persona)] = cell == "Y"
    return answers


@pytest.fixture
def world(db):
    vision, _ = project_upsert(slug="vision-lab", name="Vision Lab")
    nlp, _ = project_upsert(slug="nlp-lab", name="NLP Lab")

    def person(name, role=User.Role.RESEARCHER, **extra):
        user, _ = user_upsert(username=name, role=role, email=f"{name}@example.org")
        for field, value in extra.items():
            setattr(user, field, value)
        user.save()
        return user

    people = {
        "anon": AnonymousUser(),
        "alice": person("alice"),
        "mia": person("mia"),
        "carol": person("carol"),
        "ada": person("ada", User.Role.ADMIN),
        "root": person("root", is_superuser=True),
        "fin": person("fin", User.Role.FINANCE),
        "ex": person("ex", User.Role.ADMIN, is_active=False),
        "exmgr": person("exmgr", is_active=False),
    }
    membership_set(project=vision, user=people["alice"], role=Membership.Role.MEMBER)
    membership_set(project=vision, user=people["mia"], role=Membership.Role.MANAGER)
    membership_set(project=vision, user=people["exmgr"], role=Membership.Role.MANAGER)
    membership_set(project=nlp, user=people["carol"], role=Membership.Role.MEMBER)
    # fin also manages vision-lab on paper: finance still orders, acts and decides nothing.
    membership_set(project=vision, user=people["fin"], role=Membership.Role.MANAGER)
    return SimpleNamespace(vision=vision, nlp=nlp, people=people)


def _questions(w):
    p = w.people

    def host(owner, project):
        return SimpleNamespace(owner_id=p[owner].pk, project_id=project.pk)

    def order(requester, project):
        return SimpleNamespace(requester_id=p[requester].pk, project_id=project.pk)

    token = SimpleNamespace(user_id=p["alice"].pk)
    return {
        "see vision-lab": lambda u: permissions.can_see_project(u, w.vision),
        "see nlp-lab": lambda u: permissions.can_see_project(u, w.nlp),
        "see costs of nlp-lab": lambda u: permissions.can_see_costs_of(u, w.nlp),
        "order at all": permissions.can_order,
        "order in vision-lab": lambda u: permissions.can_order_in(u, w.vision),
        "manage vision-lab": lambda u: permissions.can_manage(u, w.vision),
        "set vision-lab's approval policy": lambda u: permissions.can_set_approval_policy(
            u, w.vision
        ),
        "set vision-lab's idle stop": lambda u: permissions.can_set_idle_policy(u, w.vision),
        "keep alice's host running": lambda u: permissions.can_keep_running(
            u, host("alice", w.vision)
        ),
        "set quotas": permissions.can_set_quotas,
        "act on alice's host in vision-lab": lambda u: permissions.can_act_on_host(
            u, host("alice", w.vision)
        ),
        "act on carol's host in nlp-lab": lambda u: permissions.can_act_on_host(
            u, host("carol", w.nlp)
        ),
        "decide alice's order in vision-lab": lambda u: permissions.can_decide(
            u, order("alice", w.vision)
        ),
        "decide mia's order in vision-lab": lambda u: permissions.can_decide(
            u, order("mia", w.vision)
        ),
        "decide carol's order in nlp-lab": lambda u: permissions.can_decide(
            u, order("carol", w.nlp)
        ),
        "cancel alice's held order": lambda u: permissions.can_cancel_order(
            u, order("alice", w.vision)
        ),
        "cancel mia's held order": lambda u: permissions.can_cancel_order(
            u, order("mia", w.vision)
        ),
        "cancel carol's held order": lambda u: permissions.can_cancel_order(
            u, order("carol", w.nlp)
        ),
        "have an approval inbox": permissions.is_approver,
        "set budgets": permissions.can_set_budgets,
        "choose what a budget does at 100%": permissions.can_choose_budget_policy,
        "reconcile the cloud bill": permissions.can_reconcile,
        "read the whole audit log": permissions.can_read_audit_log,
        # Asked as Django's permission by audit (portal.lib.backends.RoleBackend answers it).
        "have audit.view_auditevent": lambda u: u.has_perm("audit.view_auditevent"),
        "revoke alice's token": lambda u: permissions.can_revoke_token(u, token),
    }


def test_every_persona_gets_the_answer_the_table_gives(world):
    questions = _questions(world)
    table = _table()
    assert {question for question, _ in table} == set(questions)
    wrong = [
        f"{persona} / {question}: expected {expected}"
        for (question, persona), expected in table.items()
        if questions[question](world.people[persona]) is not expected
    ]
    assert wrong == []


# The queryset forms give the same answers for lists, in one query each.
VISIBLE_PROJECTS = {
    "anon": [],
    "alice": ["vision-lab"],
    "mia": ["vision-lab"],
    "carol": ["nlp-lab"],
    "ada": ["nlp-lab", "vision-lab"],
    "root": ["nlp-lab", "vision-lab"],
    "fin": ["nlp-lab", "vision-lab"],
    "ex": [],
    "exmgr": [],
}


def test_the_projects_each_persona_sees(world):
    seen = {
        name: sorted(permissions.visible_projects(user).values_list("slug", flat=True))
        for name, user in world.people.items()
    }
    assert seen == VISIBLE_PROJECTS
    for name, user in world.people.items():
        one_by_one = [
            p.slug for p in Project.objects.order_by("slug") if permissions.can_see_project(user, p)
        ]
        assert one_by_one == VISIBLE_PROJECTS[name], name


DECIDES = {
    "anon": [],
    "alice": [],
    "mia": ["alice@vision-lab"],
    "carol": [],
    "ada": ["alice@vision-lab", "carol@nlp-lab", "mia@vision-lab"],
    "root": ["alice@vision-lab", "carol@nlp-lab", "mia@vision-lab"],
    "fin": [],
    "ex": [],
    "exmgr": [],
}


def test_the_held_orders_each_persona_may_decide(world, place_order):
    p = world.people
    for requester, project in (
        ("alice", world.vision),
        ("mia", world.vision),
        ("carol", world.nlp),
    ):
        place_order(p[requester], project=project)
    Order.objects.update(status=Order.Status.PENDING_APPROVAL)
    inbox = {
        name: sorted(
            f"{o.requester.username}@{o.project.slug}"
            for o in orders_to_decide(user).select_related("requester", "project")
        )
        for name, user in p.items()
    }
    assert inbox == DECIDES
    for name, user in p.items():  # the list agrees with the yes/no form
        for held in Order.objects.all():
            assert permissions.can_decide(user, held) is (
                f"{held.requester.username}@{held.project.slug}" in DECIDES[name]
            ), name


def test_who_is_asked_to_decide_and_who_hears_of_budgets(world):
    approvers = sorted(permissions.approvers_of(world.vision).values_list("username", flat=True))
    assert approvers == ["ada", "mia", "root"]  # not the deactivated, not finance
    told = sorted(permissions.budget_recipients(world.vision).values_list("username", flat=True))
    assert told == ["fin", "mia"]


def test_an_account_deactivated_mid_session_loses_everything_at_once(world):
    mia = world.people["mia"]
    assert permissions.can_manage(mia, world.vision)
    User.objects.filter(pk=mia.pk).update(is_active=False)
    mia.refresh_from_db()
    assert not permissions.can_manage(mia, world.vision)
    assert not permissions.can_see_project(mia, world.vision)
    assert list(permissions.visible_projects(mia)) == []


def test_a_permission_granted_to_one_user_does_not_widen_what_the_role_allows(world):
    """The role backend's no is final: alice given audit.view_auditevent in the Django admin
    still reads only her own activity, as the audit pages ask has_perm."""
    from django.contrib.auth.models import Permission

    alice = world.people["alice"]
    alice.user_permissions.add(
        Permission.objects.get(content_type__app_label="audit", codename="view_auditevent")
    )
    alice = User.objects.get(pk=alice.pk)  # no cached permissions
    assert not alice.has_perm("audit.view_auditevent")
    assert alice.has_perm("audit.view_auditevent") is permissions.can_read_audit_log(alice)
