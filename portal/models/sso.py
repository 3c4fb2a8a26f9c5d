"""Single sign-on: who a person is at the identity provider, and the rules that turn the
provider's groups into roles and project memberships."""

from __future__ import annotations

from django.db import models


class ExternalIdentity(models.Model):
    """A person as the OpenID Connect provider knows them: its issuer and their ``sub``, the
    only key a sign-in is matched on (never the e-mail address, which a provider may let
    people change)."""

    user = models.OneToOneField(
        "portal.User", on_delete=models.CASCADE, related_name="external_identity"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    # The groups of the last sign-in, as the provider sent them (shown to admins).
    groups = models.JSONField(default=list, blank=True)
    last_login_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_unique_subject")
        ]

    def __str__(self) -> str:
        return f"{self.user} = {self.subject} at {self.issuer}"


class GroupRule(models.Model):
    """One provider group and what it gives: a portal role (admin or finance), or a place in
    a project (member or manager). Admins edit them on the Single sign-on page."""

    class Gives(models.TextChoices):
        ADMIN = "admin", "the admin role"
        FINANCE = "finance", "the finance role"
        MEMBER = "member", "membership of a project"
        MANAGER = "manager", "management of a project"

    group = models.CharField(max_length=200)
    gives = models.CharField(max_length=16, choices=Gives.choices)
    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "gives", "project__slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["group", "gives", "project"],
                name="group_rule_unique",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        where = f" of {self.project}" if self.project_id else ""
        return f"{self.group} -> {self.get_gives_display()}{where}"
