"""People: users with a portal role, projects and their memberships."""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser, UserManager
from django.db import models
from django.utils import timezone


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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class Notice(models.Model):
    """A message for one user in the portal (and by email): approvals, refusals, budgets."""

    user = models.ForeignKey("portal.User", on_delete=models.CASCADE, related_name="notices")
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    link = models.CharField(max_length=300, blank=True)
    # A button on the notice that answers it where it is read (Keep running on an idle warning):
    # a POST to a portal page, which checks permission and state as its own button does.
    action_label = models.CharField(max_length=40, blank=True)
    action_url = models.CharField(max_length=300, blank=True)
    # When the button stops making sense (an idle warning's stop time); none: it always does.
    action_until = models.DateTimeField(null=True, blank=True)
    # What the notice is about, e.g. "order:<id>:decide" or "budget:<project>:<month>": when
    # the world answers it (the order is decided, the month ends), notices_close(topic=...)
    # closes every notice of that topic. Empty: only its reader closes it (dismiss).
    topic = models.CharField(max_length=120, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["user", "read_at"]),
            models.Index(fields=["user", "closed_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.subject}"

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    @property
    def action_open(self) -> bool:
        """Whether the notice shows its button: it is open, has one and its moment has not
        passed."""
        return (
            self.closed_at is None
            and bool(self.action_url)
            and (self.action_until is None or timezone.now() < self.action_until)
        )


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the secret is shown once."""

    user = models.ForeignKey("portal.User", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise it")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.user} token {self.prefix}… ({self.name})"
