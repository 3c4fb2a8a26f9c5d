"""The demo's pool: vision-lab's notebook fleet, four hosts on working days in Berlin and none
at night, so a newcomer sees a pool with a schedule. Made through the pool services; safe to
run twice (an existing live pool of that name is left as it is)."""

from __future__ import annotations

from instances import services
from instances.models import InstanceType, Pool
from portal.models import Project, User

POOL_NAME = "notebooks"
POOL_TYPE = "g5.xlarge"
# The demo's public key (its private half is not kept anywhere: nobody logs in to demo hosts).
DEMO_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMnTCxT9SAUjkzX5rNMa4S1lAU2qZuNCGOZXC0e3kBci "
    "demo@vision-lab"
)
SCHEDULE = [
    # cron, zone, desired: grow at 09:00 on working days in Berlin, shrink at 21:00 every day
    ("0 9 * * 1-5", "Europe/Berlin", 4),
    ("0 21 * * *", "Europe/Berlin", 0),
]


def seed_demo_pool() -> str:
    """Create vision-lab's notebook pool and its working-hours schedule; say what was done."""
    project = Project.objects.get(slug="vision-lab")
    if Pool.objects.live().filter(project=project, name=POOL_NAME).exists():
        return f"Pool {POOL_NAME} in vision-lab: already there."
    kind = InstanceType.objects.offered().filter(name=POOL_TYPE).first()
    images = kind.compatible_images() if kind else []
    if not images:
        return f"Pool {POOL_NAME}: skipped ({POOL_TYPE} or an image for it is not in the catalog)."
    alice = User.objects.get(username="alice")
    pool = services.pool_create(
        user=alice,
        project=project,
        name=POOL_NAME,
        instance_type=kind,
        image=images[0],
        ssh_public_key=DEMO_KEY,
        min_size=0,
        desired=0,
        max_size=6,
        # All spot: vision-lab's budget refuses new on-demand hosts once the month's money is
        # spent, and a demo opening late in a month should still show the pool at work.
        on_demand_base=0,
        spot_percent=100,
        interruption_policy="relaunch_spot",
        target_gpu_utilization=70,
    )
    for cron, zone, desired in SCHEDULE:
        services.schedule_create(pool=pool, user=alice, cron=cron, timezone=zone, desired=desired)
    return (
        f"Pool {POOL_NAME} in vision-lab: {POOL_TYPE}, 0..6 hosts, desired 4 from 09:00 on "
        "working days (Europe/Berlin), 0 from 21:00."
    )
