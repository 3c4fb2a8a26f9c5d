"""People: users with a portal role, projects and their memberships."""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser, UserManager
from django.db import models


class User(AbstractUser):
    """A person who signs in. ``role`` decides what the portal lets them do everywhere."""

    class Role(models.TextChoices):
        RESEARCHER = "researcher", "Researcher"
        ADMIN = "admin", "Admin"
        FINANCE = "finance", "Finance"

    role = models.CharField(max_length=16, choices=Role.choices, default=Role.RESEARCHER)

    objects = UserManager()

    # Who someone is; what they may do is answered in portal/permissions.py. An inactive
    # account holds no role.
    @property
    def is_portal_admin(self) -> bool:
        return (
            self.is_authenticated
            and self.is_active
            and (self.role == self.Role.ADMIN or self.is_superuser)
        )

    @property
    def is_finance(self) -> bool:
        return (
            self.is_authenticated
            and self.is_active
            and self.role == self.Role.FINANCE
            and not self.is_superuser
        )

    @property
    def sees_everything(self) -> bool:
        """Admins and finance read every project; researchers read their own."""
        return self.is_portal_admin or self.is_finance


class ProjectQuerySet(models.QuerySet):
    def for_user(self, user) -> ProjectQuerySet:
        """The projects this person may see (portal.permissions.visible_projects)."""
        if not (user.is_authenticated and user.is_active):
            return self.none()
        if user.sees_everything:
            return self.all()
        return self.filter(pk__in=Membership.objects.filter(user=user).values("project_id"))


class Project(models.Model):
    """A research group that orders hosts, holds quotas (instances.models.quotas) and pays the
    bill."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user's place in a project: a member orders hosts, a manager also runs the project."""

    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        MANAGER = "manager", "Manager"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey("portal.User", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    # Given by the identity provider's groups at sign-in (portal/services/sso.py): such a
    # membership follows the groups, and ends when the person leaves the group.
    from_sso = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"
