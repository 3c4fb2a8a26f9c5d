"""A project's quotas (for the project, or for one member in it), their history and the
requests for more. The tables keep the names they had in portal (``portal_quota`` ...), where
these models lived until issue 23 moved them beside the orders they govern."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


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

    project = models.ForeignKey("portal.Project", on_delete=models.CASCADE, related_name="quotas")
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
        db_table = "portal_quota"  # defined in portal until issue 23 moved it; same table
        ordering = ["project__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"], condition=models.Q(user=None), name="quota_one_per_project"
            ),
            models.UniqueConstraint(fields=["project", "user"], name="quota_one_per_member"),
        ]

    def __str__(self) -> str:
        return f"quota {self.project}" + (f" / {self.user}" if self.user_id else "")

    @property
    def raisable(self) -> bool:
        """What a granted request for more quota raises: the project's own GPU limit (a
        member's quota, per-model limits, hosts, types and leases are an admin's edit)."""
        return self.user_id is None and self.max_gpus is not None

    def limit_is_raisable(self, limit: QuotaLimit) -> bool:
        """Whether granting a request for more quota raises ``limit`` (one of limits())."""
        return self.raisable and limit.unit == "gpus" and not limit.gpu_model

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
        db_table = "portal_quotachange"
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

    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, related_name="quota_requests"
    )
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
        db_table = "portal_quotarequest"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.requester} asks {self.gpus} GPUs more in {self.project} ({self.status})"
