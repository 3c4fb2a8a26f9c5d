"""Single sign-on's writers: a person the provider vouches for becomes (or stays) a portal
user with the role and projects their groups give, by the rules admins keep; and the rules.

Matched on the provider's ``sub`` only. Memberships a rule gave follow the groups: leave the
group at the provider and the membership ends at the next sign-in (tokens act as the person,
so they lose the project with it). Memberships an admin gave by hand are left alone.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import ExternalIdentity, GroupRule, Membership, Project, User
from portal.services.people import user_upsert

GROUP_MAX = 200
USERNAME_MAX = 140
G = GroupRule.Gives


class SignInRefused(Exception):
    """Why a person the provider vouched for may not sign in, as a sentence for them."""

    code = "sso_refused"


def sso_groups(claims: dict) -> list[str]:
    """The groups in the claim PORTAL_OIDC_GROUPS_CLAIM names (a list, or one name)."""
    value = claims.get(settings.PORTAL_OIDC_GROUPS_CLAIM) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({g for g in value if isinstance(g, str) and g and len(g) <= GROUP_MAX})


def sso_grants(groups: list[str]) -> tuple[str | None, dict[Project, str]]:
    """What the groups give: a role (admin before finance), and a membership role per project
    (manager before member)."""
    rules = list(GroupRule.objects.filter(group__in=groups).select_related("project"))
    gives = {rule.gives for rule in rules}
    role = None
    if G.ADMIN in gives:
        role = User.Role.ADMIN
    elif G.FINANCE in gives:
        role = User.Role.FINANCE
    places: dict[Project, str] = {}
    for rule in rules:
        if rule.project is None or not rule.project.is_active:
            continue
        if rule.gives == G.MANAGER or places.get(rule.project) != Membership.Role.MANAGER:
            places[rule.project] = rule.gives
    return role, places


def _new_username(claims: dict) -> str:
    raw = claims.get("preferred_username") or (claims.get("email") or "").split("@")[0] or "user"
    base = re.sub(r"[^A-Za-z0-9@.+_-]", "", str(raw))[:USERNAME_MAX] or "user"
    name, n = base, 1
    while User.objects.filter(username=name).exists():
        n += 1
        name = f"{base[: USERNAME_MAX - 6]}-{n}"
    return name


def _text(claims: dict, name: str, most: int) -> str:
    value = claims.get(name)
    return value[:most] if isinstance(value, str) and "\x00" not in value else ""


@transaction.atomic
def sso_sign_in(*, issuer: str, claims: dict) -> User:
    """The portal user for a person the provider has vouched for (``claims``: the ID token's
    and userinfo's), created on the first sign-in, their role, names and memberships brought
    in line with their groups on every one. Raises SignInRefused when the groups give
    nothing, or the account is switched off."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise SignInRefused("The identity provider sent no usable subject (sub); ask an admin.")
    groups = sso_groups(claims)
    role, places = sso_grants(groups)
    provider = settings.PORTAL_OIDC_PROVIDER_NAME
    if role is None and not places:
        said = ", ".join(groups[:10]) or "none"
        raise SignInRefused(
            f"Your groups at {provider} ({said}) give you no place in this portal yet. Ask an "
            "admin to map one of them to a project or a role."
        )
    identity = (
        ExternalIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is not None and not identity.user.is_active:
        raise SignInRefused("This account is switched off in the portal; ask an admin.")
    username = identity.user.username if identity else _new_username(claims)
    user, _ = user_upsert(
        username=username,
        role=role or User.Role.RESEARCHER,
        email=_text(claims, "email", 254),
        first_name=_text(claims, "given_name", 150),
        last_name=_text(claims, "family_name", 150),
    )
    if identity is None:
        user.set_unusable_password()
        user.save(update_fields=["password"])
        identity = ExternalIdentity(user=user, issuer=issuer, subject=subject)
    identity.groups, identity.last_login_at = groups, timezone.now()
    identity.save()
    _follow_groups(user, places)
    return user


def _follow_groups(user: User, places: dict[Project, str]) -> None:
    mine = {m.project_id: m for m in Membership.objects.filter(user=user)}
    for membership in mine.values():
        if membership.from_sso and membership.project_id not in {p.pk for p in places}:
            membership.delete()
    for project, role in places.items():
        held = mine.get(project.pk)
        if held is not None and not held.from_sso:
            continue  # an admin's own choice stands
        Membership.objects.update_or_create(
            project=project, user=user, defaults={"role": role, "from_sso": True}
        )


def _group(value) -> str:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ValidationError({"group": "Name the provider's group, e.g. vision-lab-leads."})
    value = value.strip()
    if len(value) > GROUP_MAX:
        raise ValidationError({"group": f"A group name is at most {GROUP_MAX} characters."})
    return value


@transaction.atomic
def group_rule_add(
    *, actor: User, group: str, gives: str, project: Project | None = None
) -> GroupRule:
    """A new rule: members of ``group`` get a role (admin, finance) or a place in ``project``
    (member, manager), from their next sign-in."""
    if not permissions.can_set_sso_rules(actor):
        raise Forbidden("Only admins map the identity provider's groups.")
    group = _group(group)
    if gives not in G.values:
        raise ValidationError({"gives": f"Choose one of {', '.join(G.values)}."})
    if gives in (G.MEMBER, G.MANAGER) and project is None:
        raise ValidationError({"project": "Choose the project this group's members join."})
    if gives in (G.ADMIN, G.FINANCE):
        project = None
    if GroupRule.objects.filter(group=group, gives=gives, project=project).exists():
        raise Conflict(f"{group} already gives that.", code="duplicate_rule")
    return GroupRule.objects.create(group=group, gives=gives, project=project)


@transaction.atomic
def group_rule_delete(*, actor: User, rule: GroupRule) -> None:
    """Remove a rule; people keep what it gave until their next sign-in."""
    if not permissions.can_set_sso_rules(actor):
        raise Forbidden("Only admins map the identity provider's groups.")
    GroupRule.objects.filter(pk=rule.pk).delete()
