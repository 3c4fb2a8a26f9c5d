"""People: users with a portal role, projects and their memberships."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser, UserManager
from django.core.exceptions import ValidationError
from django.db import models

from portal.lib import isolation


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

    # Where the project's hosts run and what guards them (admins set these; a field left empty
    # takes the portal's PORTAL_EC2_* setting: isolation_in_effect).
    class Tenancy(models.TextChoices):
        DEFAULT = "default", "Shared hardware"
        DEDICATED = "dedicated", "Dedicated instances"
        HOST = "host", "A dedicated host"

    subnet_ids = models.JSONField(
        default=list, blank=True, validators=[isolation.validate_subnet_ids]
    )
    security_group_ids = models.JSONField(
        default=list, blank=True, validators=[isolation.validate_security_group_ids]
    )
    kms_key_id = models.CharField(
        max_length=300, blank=True, validators=[isolation.validate_kms_key]
    )
    tenancy = models.CharField(max_length=16, choices=Tenancy.choices, default=Tenancy.DEFAULT)
    host_id = models.CharField(max_length=32, blank=True, validators=[isolation.validate_host_id])
    instance_profile = models.CharField(
        max_length=300, blank=True, validators=[isolation.validate_instance_profile]
    )

    # Whom the project's MIG slices share a GPU host with (instances/services/mig.py): only
    # each other, on shared hosts of the project's own, or any project's that is in the
    # portal's pool, on hosts launched with the portal's defaults (so a project with isolation
    # of its own keeps to its own).
    class MigPool(models.TextChoices):
        PROJECT = "project", "The project's own shared hosts"
        PORTAL = "portal", "The portal's shared pool"

    mig_pool = models.CharField(max_length=16, choices=MigPool.choices, default=MigPool.PROJECT)

    ISOLATION_FIELDS = (
        "subnet_ids",
        "security_group_ids",
        "kms_key_id",
        "tenancy",
        "host_id",
        "instance_profile",
        "mig_pool",
    )

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def isolation_in_effect(self) -> dict:
        """What the project's hosts launch with: each isolation field the project sets, else
        the portal's PORTAL_EC2_* setting (tenancy and host are the project's alone)."""
        return {
            "subnet_ids": list(self.subnet_ids or settings.PORTAL_EC2_SUBNET_IDS),
            "security_group_ids": list(
                self.security_group_ids or settings.PORTAL_EC2_SECURITY_GROUP_IDS
            ),
            "kms_key_id": self.kms_key_id or settings.PORTAL_EC2_KMS_KEY_ID,
            "tenancy": self.tenancy,
            "host_id": self.host_id,
            "instance_profile": self.instance_profile or settings.PORTAL_EC2_INSTANCE_PROFILE,
        }

    def clean(self) -> None:
        if self.tenancy == self.Tenancy.HOST and not self.host_id:
            raise ValidationError(
                {"host_id": "Host tenancy runs every host on one dedicated host: give its id."}
            )
        if self.host_id and self.tenancy != self.Tenancy.HOST:
            raise ValidationError(
                {"host_id": "A dedicated host id goes with tenancy host; leave it empty."}
            )
        if self.mig_pool == self.MigPool.PORTAL and self.isolates():
            raise ValidationError(
                {
                    "mig_pool": "The portal's shared pool runs slices of many projects on hosts "
                    "launched with the portal's defaults; a project with subnets, security "
                    "groups, a volume key, a tenancy or an instance profile of its own keeps "
                    "its slices on its own hosts."
                }
            )

    def isolates(self) -> bool:
        """Whether the project launches its hosts with anything of its own (not the portal's
        defaults)."""
        return bool(
            self.subnet_ids
            or self.security_group_ids
            or self.kms_key_id
            or self.tenancy != self.Tenancy.DEFAULT
            or self.instance_profile
        )


class ProjectChange(models.Model):
    """Who changed a project's isolation (its network, key, tenancy, instance profile), when,
    from what to what: the project's history."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="changes")
    changed_by = models.ForeignKey(
        "portal.User", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField(auto_now_add=True)
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.project} changed by {self.changed_by} at {self.changed_at:%Y-%m-%d %H:%M}"


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
