"""Seed the demo: the catalog, projects, people and their memberships, and 60 days of history
(demo/services/history.py). Safe to run twice: the second run changes nothing and says so."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.utils import timezone

from audit.services import audit_record_system
from billing.models import Budget
from billing.services.budgets import budget_set
from billing.services.prices import spot_prices_refresh
from demo.services.history import DAYS, history_build, history_exists
from demo.services.jobs import seed_demo_jobs
from demo.services.pools import seed_demo_pool
from instances.models import IdlePolicy, Image, InstanceType, Quota
from instances.services import approval_policy_set, idle_policy_set, quota_set
from portal.models import Membership, Project, User
from portal.services import membership_set, project_upsert, user_upsert

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


# vision-lab's hosts are stopped after an hour below 5 % GPU (warned 10 minutes before).
DEMO_IDLE_POLICY = {
    "vision-lab": {"idle_minutes": 60, "warning_minutes": 10, "threshold_percent": 5}
}


def snapshot() -> tuple:
    """What seeding may change, to tell a run that changed nothing."""
    return (
        sorted(User.objects.values_list("username", "role", "password", "is_active")),
        sorted(Project.objects.values_list("slug", "name", "description")),
        sorted(Membership.objects.values_list("project__slug", "user__username", "role")),
        sorted(InstanceType.objects.values_list("name", "on_demand_price_per_hour", "is_active")),
        sorted(Image.objects.values_list("name", "cuda_version")),
        Quota.objects.count(),
        sorted(Budget.objects.values_list("project__slug", "monthly_amount", "policy")),
        IdlePolicy.objects.count(),
    )


class Command(BaseCommand):
    help = (
        "Create the demo catalog, projects and users (password: PORTAL_DEMO_PASSWORD), and "
        f"{DAYS} days of history on the simulated cloud."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-catalog", action="store_true", help="skip sync_catalog")
        parser.add_argument(
            "--no-history", action="store_true", help=f"skip the {DAYS} days of history"
        )

    def handle(self, *args, **options):
        before, played = snapshot(), False
        wants_history = not options["no_history"] and not options["no_catalog"]
        if wants_history and settings.PORTAL_PROVIDER != "simulated":
            self.stdout.write("History: skipped (it is played on the simulated cloud only).")
            wants_history = False
        if wants_history and not history_exists():
            began = time.monotonic()
            self.stdout.write(f"History: playing {DAYS} days on the simulated cloud...")
            stats = history_build(
                now=timezone.now(), out=self.stdout.write, before=lambda: self.seed(options)
            )
            took = time.monotonic() - began
            done = ", ".join(f"{count} {what}" for what, count in sorted(stats.items()))
            self.stdout.write(f"History: {done} (in {took:.0f} s).")
            played = True
        else:
            self.seed(options)
            if wants_history:
                self.stdout.write("History: unchanged (already played).")
        if not options["no_catalog"]:
            # After the history: its hosts and these are not in each other's way.
            self.stdout.write(seed_demo_jobs())
        if not played and snapshot() == before:
            self.stdout.write("Demo: unchanged.")

    def seed(self, options) -> None:
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
        for slug, values in DEMO_IDLE_POLICY.items():
            if not hasattr(projects[slug], "idle_policy"):
                idle_policy_set(project=projects[slug], actor=admin, **values)
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
