"""People: users with a portal role, projects and their memberships."""

from __future__ import annotations

from dataclasses import dataclass

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
    """A research group that orders hosts, holds quotas and pays the bill."""

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


@dataclass(frozen=True)
class QuotaLimit:
    """One counted limit of a quota beside what is in use: ``unit`` says what an order adds to
    it (``gpus`` or ``hosts``); ``gpu_model`` is set on a per-model limit."""

    label: str
    limit: int
    in_use: int
    unit: str
    gpu_model: str = ""

    @property
    def over(self) -> bool:
        return self.in_use > self.limit


class Quota(models.Model):
    """Limits for a project, or for one member within it (``user`` set). Empty means no limit.

    Usage is never stored: the instances app counts the live hosts under the project's lock, so
    a host that ends, however it ends, stops counting exactly once.
    """

    # Every field a quota sets, with the name people read it by (history lines, forms).
    FIELDS = {
        "max_gpus": "GPUs",
        "max_gpus_by_model": "GPUs per model",
        "max_instances": "hosts",
        "max_lease_hours": "longest lease",
        "allowed_instance_types": "types",
        "allowed_markets": "markets",
    }
    # The most entries a quota's lists and mappings take (the catalog offers far fewer names):
    # whatever one request stores, every page, API answer and history line carries again.
    MAX_NAMES = 100
    MARKETS = ("on_demand", "spot")

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="quotas")
    user = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.CASCADE, related_name="quotas"
    )
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Live GPUs in total")
    max_gpus_by_model = models.JSONField(
        default=dict, blank=True, help_text='Live GPUs per GPU model, e.g. {"H100": 16}'
    )
    max_instances = models.PositiveIntegerField(null=True, blank=True)
    max_lease_hours = models.PositiveIntegerField(null=True, blank=True)
    allowed_instance_types = models.JSONField(
        default=list, blank=True, help_text="Instance types allowed; empty allows all"
    )
    allowed_markets = models.JSONField(
        default=dict,
        blank=True,
        help_text='Markets allowed per instance type, e.g. {"p5.48xlarge": ["spot"]}',
    )
    updated_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"], condition=models.Q(user=None), name="quota_one_per_project"
            ),
            models.UniqueConstraint(fields=["project", "user"], name="quota_one_per_member"),
        ]

    def __str__(self) -> str:
        return f"quota {self.project}" + (f" / {self.user}" if self.user_id else "")

    def limits(self, used) -> list[QuotaLimit]:
        """The counted limits this quota sets (GPUs, hosts, GPUs per model, in that order)
        against ``used`` (anything with ``gpus``, ``instances`` and ``gpus_by_model``); the one
        list the order check, the bars and the API's ``over_limit`` all read."""
        found = []
        if self.max_gpus is not None:
            found.append(QuotaLimit("GPUs", self.max_gpus, used.gpus, "gpus"))
        if self.max_instances is not None:
            found.append(QuotaLimit("hosts", self.max_instances, used.instances, "hosts"))
        for model, limit in sorted(self.max_gpus_by_model.items()):
            found.append(
                QuotaLimit(f"{model} GPUs", limit, used.gpus_by_model.get(model, 0), "gpus", model)
            )
        return found

    def is_over(self, used) -> bool:
        return any(limit.over for limit in self.limits(used))


class QuotaChange(models.Model):
    """Who changed a quota, when, from what to what."""

    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="changes")
    changed_by = models.ForeignKey(
        "portal.User", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField(auto_now_add=True)
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.quota} changed by {self.changed_by} at {self.changed_at:%Y-%m-%d %H:%M}"


class QuotaRequestQuerySet(models.QuerySet):
    def for_user(self, user) -> QuotaRequestQuerySet:
        """Admins see every request; anyone else the requests they made."""
        if not (user.is_authenticated and user.is_active):
            return self.none()
        if user.is_portal_admin:
            return self.all()
        return self.filter(requester=user)


class QuotaRequest(models.Model):
    """A member's ask for more of a project's quota, open until an admin grants or declines
    it; granting raises the project's GPU limit by what was asked."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        GRANTED = "granted", "Granted"
        DECLINED = "declined", "Declined"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="quota_requests")
    requester = models.ForeignKey(
        "portal.User", on_delete=models.CASCADE, related_name="quota_requests"
    )
    gpus = models.PositiveIntegerField(help_text="GPUs asked for on top of the current limit")
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    answer = models.CharField(max_length=500, blank=True)

    objects = QuotaRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.requester} asks {self.gpus} GPUs more in {self.project} ({self.status})"


class ApprovalPolicy(models.Model):
    """Which orders of a project need a human yes from an admin or a project manager."""

    project = models.OneToOneField(
        Project, on_delete=models.CASCADE, related_name="approval_policy"
    )
    gpus_above = models.PositiveIntegerField(
        null=True, blank=True, help_text="Orders for more GPUs than this need approval"
    )
    instance_types = models.JSONField(
        default=list, blank=True, help_text="Orders for these types always need approval"
    )
    on_demand_price_above = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="On-demand orders above this price per hour (all hosts) need approval",
    )
    expire_after_days = models.PositiveIntegerField(default=3)
    updated_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"approval policy of {self.project}"


class IdlePolicy(models.Model):
    """When a project's hosts count as idle and are stopped: GPU utilization below
    ``threshold_percent`` for ``idle_minutes``, with a warning ``warning_minutes`` before.
    Defined here with the project; enforced by instances (which reads its own telemetry)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="idle_policy")
    enabled = models.BooleanField(default=True)
    # The help text is spelt as migration 0003 records it (respelling it needs a migration).
    threshold_percent = models.PositiveSmallIntegerField(
        default=5, help_text="A host is idle while its GPU utilisation stays below this"
    )
    idle_minutes = models.PositiveIntegerField(
        default=60, help_text="Idle this long and the host is stopped (spot: terminated)"
    )
    warning_minutes = models.PositiveIntegerField(
        default=5, help_text="The owner is warned this long before the stop"
    )
    snooze_hours = models.PositiveIntegerField(
        default=4, help_text="Keep running holds off the idle stop this long"
    )
    updated_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"idle policy of {self.project}"


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
