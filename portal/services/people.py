"""Writers of people and projects: users, projects and memberships."""

from __future__ import annotations

from django.db import transaction

from audit.registry import ISOLATION_CHECKS
from portal.models import (
    Membership,
    Project,
    ProjectChange,
    User,
)


@transaction.atomic
def user_upsert(
    *,
    username: str,
    role: str,
    email: str = "",
    first_name: str = "",
    last_name: str = "",
    password: str | None = None,
) -> tuple[User, bool]:
    """Create the user, or bring an existing one's role and names up to date.

    The password is set only when the user is created, so re-running a seed never resets a
    password somebody changed.
    """
    user, created = User.objects.select_for_update().get_or_create(
        username=username,
        defaults={"email": email, "first_name": first_name, "last_name": last_name},
    )
    user.role = role
    # Admins run the Django admin too; nobody else gets staff rights.
    user.is_staff = user.is_superuser = role == User.Role.ADMIN
    if email:
        user.email = email
    if first_name:
        user.first_name = first_name
    if last_name:
        user.last_name = last_name
    if created:
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
    user.full_clean(exclude=["password"])
    user.save()
    return user, created


@transaction.atomic
def project_upsert(*, slug: str, name: str, description: str = "") -> tuple[Project, bool]:
    project, created = Project.objects.update_or_create(
        slug=slug, defaults={"name": name, "description": description}
    )
    return project, created


@transaction.atomic
def project_save(*, project: Project) -> Project:
    """Save a project edited in the Django admin, validating it first."""
    project.full_clean()
    project.save()
    return project


@transaction.atomic
def project_isolation_set(*, project: Project, actor: User | None, **values) -> Project:
    """Set some of a project's isolation fields (Project.ISOLATION_FIELDS) and record the
    change, old and new values, in its history. Leaving host tenancy drops the host id with
    it. Malformed values raise ValidationError and change nothing; an unchanged value leaves no
    history."""
    unknown = set(values) - set(Project.ISOLATION_FIELDS)
    if unknown:
        raise TypeError(f"not isolation fields: {sorted(unknown)}")
    project = Project.objects.select_for_update().get(pk=project.pk)
    if values.get("tenancy", project.tenancy) != Project.Tenancy.HOST:
        values.setdefault("host_id", "")
    before = {name: getattr(project, name) for name in values}
    for name, value in values.items():
        setattr(project, name, value)
    project.full_clean()
    for check in ISOLATION_CHECKS:  # what other apps hold against it (a pool's spot share)
        check(project, values=values)
    changed = [name for name in values if before[name] != values[name]]
    if changed:
        project.save(update_fields=changed)
        ProjectChange.objects.create(
            project=project,
            changed_by=actor,
            before={name: before[name] for name in changed},
            after={name: values[name] for name in changed},
        )
    return project


@transaction.atomic
def membership_set(*, project: Project, user: User, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(
        project=project, user=user, defaults={"role": role}
    )
    return membership


@transaction.atomic
def membership_remove(*, project: Project, user: User) -> None:
    Membership.objects.filter(project=project, user=user).delete()


# --- quotas ----------------------------------------------------------------------------------
