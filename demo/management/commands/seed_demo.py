"""Seed the demo: the catalog, projects, people and their memberships. Safe to run twice."""

from __future__ import annotations

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from audit.services import audit_record_system
from billing.budgets import budget_set
from billing.models import Budget
from billing.prices import spot_prices_refresh
from demo.pools import seed_demo_pool
from portal.models import Membership, User
from portal.services import (
    approval_policy_set,
    membership_set,
    project_upsert,
    quota_set,
    user_upsert,
)

PROJECTS = [
    ("vision-lab", "Vision Lab", "Image models: detection, segmentation, ViT pre-training."),
    ("nlp-lab", "NLP Lab", "Language models: fine-tuning and evaluation."),
]
DEMO_QUOTAS = {
    "vision-lab": {"max_gpus": 32, "max_gpus_by_model": {"H100": 16}, "max_lease_hours": 72},
    "nlp-lab": {"max_gpus": 16, "allowed_markets": {"p5.48xlarge": ["spot"]}},
}
PEOPLE = [
    # username, first, last, role, [(project, membership role)]
    ("alice", "Alice", "Andersen", User.Role.RESEARCHER, [("vision-lab", "member")]),
    ("bob", "Bob", "Brandt", User.Role.RESEARCHER, [("vision-lab", "member")]),
    ("carol", "Carol", "Costa", User.Role.RESEARCHER, [("nlp-lab", "member")]),
    ("ada", "Ada", "Admin", User.Role.ADMIN, []),
    ("fin", "Fin", "Finance", User.Role.FINANCE, []),
]


# Monthly budgets (dollars) and what happens at 100 %, set only where none exist yet.
DEMO_BUDGETS = {
    "vision-lab": ("5000.00", "block_on_demand"),
    "nlp-lab": ("2000.00", "notify"),
}


class Command(BaseCommand):
    help = "Create the demo catalog, projects and users (password: PORTAL_DEMO_PASSWORD)."

    def add_arguments(self, parser):
        parser.add_argument("--no-catalog", action="store_true", help="skip sync_catalog")

    def handle(self, *args, **options):
        if not options["no_catalog"]:
            call_command("sync_catalog", stdout=self.stdout, stderr=self.stderr)
            added = spot_prices_refresh()
            self.stdout.write(f"Spot prices: {added} new observations.")
        projects = {}
        for slug, name, description in PROJECTS:
            projects[slug], _ = project_upsert(slug=slug, name=name, description=description)
        created_users = []
        for username, first, last, role, memberships in PEOPLE:
            user, created = user_upsert(
                username=username,
                role=role,
                email=f"{username}@example.org",
                first_name=first,
                last_name=last,
                password=settings.PORTAL_DEMO_PASSWORD,
            )
            if created:
                created_users.append(username)
            for slug, membership_role in memberships:
                membership_set(
                    project=projects[slug], user=user, role=Membership.Role(membership_role)
                )
        # Limits that show what admins can do, set only where none exist yet.
        admin = User.objects.get(username="ada")
        for slug, limits in DEMO_QUOTAS.items():
            if not projects[slug].quotas.exists():
                quota_set(project=projects[slug], actor=admin, **limits)
        if not hasattr(projects["vision-lab"], "approval_policy"):
            approval_policy_set(project=projects["vision-lab"], actor=admin, gpus_above=8)
        for slug, (amount, policy) in DEMO_BUDGETS.items():
            if not Budget.objects.filter(project=projects[slug]).exists():
                budget_set(
                    project=projects[slug], actor=admin, monthly_amount=amount, policy=policy
                )
        self.stdout.write(seed_demo_pool())
        audit_record_system(
            name="seed_demo",
            kind="command",
            action="seed",
            summary={"projects": list(projects), "new_users": created_users},
        )
        self.stdout.write(
            f"Demo people: {len(PEOPLE)} ({len(created_users)} new); "
            f"projects: {', '.join(projects)}."
        )
        self.stdout.write(f"\n  Demo logins (password: {settings.PORTAL_DEMO_PASSWORD})")
        for username, _, _, role, memberships in PEOPLE:
            where = ", ".join(f"{slug} {kind}" for slug, kind in memberships) or "all projects"
            self.stdout.write(f"    {username:<6} {role.label:<11} {where}")
