"""seed_demo creates the demo people, projects and catalog; running it twice changes nothing.

These run without the history (``--no-history``); tests/demo/test_history.py plays it."""

from __future__ import annotations

import io

from django.conf import settings
from django.core.management import call_command

from instances.models import Image, InstanceType
from portal.models import Membership, Project, User


def seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", "--no-history", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def snapshot():
    return (
        sorted(User.objects.values_list("username", "role", "password")),
        sorted(Project.objects.values_list("slug", "name")),
        sorted(Membership.objects.values_list("project__slug", "user__username", "role")),
        sorted(InstanceType.objects.values_list("name", "on_demand_price_per_hour")),
        sorted(Image.objects.values_list("name", "cuda_version")),
    )


def test_seed_creates_the_personas_with_the_demo_password(db):
    seed()
    roles = dict(User.objects.values_list("username", "role"))
    assert roles == {
        "alice": "researcher",
        "bob": "researcher",
        "carol": "researcher",
        "ada": "admin",
        "fin": "finance",
    }
    members = set(Membership.objects.values_list("project__slug", "user__username"))
    assert members == {("vision-lab", "alice"), ("vision-lab", "bob"), ("nlp-lab", "carol")}
    assert User.objects.get(username="carol").check_password(settings.PORTAL_DEMO_PASSWORD)
    assert User.objects.get(username="ada").is_staff
    assert not User.objects.get(username="fin").is_staff


def test_seed_twice_changes_nothing_and_says_so(db):
    assert "unchanged" not in seed().replace("0 unchanged", "")
    first = snapshot()
    again = seed()
    assert "Demo: unchanged." in again
    assert "Images: 0 created, 0 updated, 6 unchanged." in again
    assert snapshot() == first


def test_seed_sets_demo_budgets_once_and_keeps_a_changed_one(db):
    from billing.models import Budget
    from billing.services.budgets import budget_set

    seed()
    budgets = {b.project.slug: (str(b.monthly_amount), b.policy) for b in Budget.objects.all()}
    assert budgets == {
        "vision-lab": ("5000.00", "block_on_demand"),
        "nlp-lab": ("2000.00", "notify"),
    }
    vision = Budget.objects.get(project__slug="vision-lab").project
    budget_set(project=vision, actor=User.objects.get(username="fin"), monthly_amount="7500")
    seed()
    assert str(Budget.objects.get(project=vision).monthly_amount) == "7500.00"


def test_seed_keeps_a_password_somebody_changed(db):
    seed()
    alice = User.objects.get(username="alice")
    alice.set_password("alices-own-secret-9")
    alice.save()
    seed()
    assert User.objects.get(username="alice").check_password("alices-own-secret-9")


def test_demo_users_exist_only_when_seeded(db):
    assert not User.objects.exists()


def test_seeded_catalog_has_the_issue_types_and_chinese_enterprise_gpus(db):
    seed()
    gpus = dict(InstanceType.objects.values_list("name", "gpu_model"))
    for name, gpu in {
        "g5.xlarge": "A10G",
        "g6.xlarge": "L4",
        "g6e.xlarge": "L40S",
        "p4d.24xlarge": "A100",
        "p4de.24xlarge": "A100",
        "p5.48xlarge": "H100",
        "p5e.48xlarge": "H200",
    }.items():
        assert gpus[name] == gpu
    assert {"A800", "H800"} <= set(gpus.values())
    p4d = InstanceType.objects.get(name="p4d.24xlarge")
    assert (p4d.gpu_count, p4d.gpu_memory_gib, p4d.gpu_architecture) == (8, 40, "8.0")
    assert InstanceType.objects.get(name="p4de.24xlarge").gpu_memory_gib == 80
    assert p4d.price_source.startswith("AWS EC2 On-Demand pricing")
    assert p4d.price_as_of is not None


def test_seed_leaves_the_logins_to_make_runs_banner(db):
    # The banner prints them once the portal is up; printed here too, they came twice.
    out = seed()
    assert "Demo logins" not in out
    assert settings.PORTAL_DEMO_PASSWORD not in out


def test_seed_opens_jobs_with_one_recovered_one_failed_and_one_to_run(db, settings, tmp_path):
    from instances.models import Job
    from instances.selectors.jobs import job_log_read

    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    said = seed()
    assert "Jobs in vision-lab: vit-small-cifar (recovered once)" in said
    jobs = {job.name: job for job in Job.objects.all()}
    done, failed, running = (
        jobs["vit-small-cifar"],
        jobs["bert-base-sweep"],
        jobs["resnet50-imagenet"],
    )
    assert done.status == "succeeded" and done.recoveries == 1
    assert [run.outcome for run in done.runs.all()] == ["interrupted", "succeeded"]
    run_two = job_log_read(done).text.split("=== run 2", 1)[1]
    assert "starting at epoch 13 of 30" in run_two
    assert failed.status == "failed" and "loss is nan" in job_log_read(failed).text
    # The played hosts ended with their jobs; the running one waits for the worker.
    assert not done.order.instances.filter(status__in=["running", "terminating"]).exists()
    assert running.status == "pending" and running.order.instances.get().status == "requested"
    assert "Jobs in vision-lab: already there." in seed()
    assert Job.objects.count() == 3
