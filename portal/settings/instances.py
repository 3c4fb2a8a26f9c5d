"""The cloud, GPU telemetry and the idle stop, orders and their hooks, provisioning, spot
recovery, pools and checkpoints (the instances app's knobs)."""

from __future__ import annotations

from pathlib import Path

from portal.env import env_bool, env_float, env_int, env_list, env_str
from portal.settings.base import BASE_DIR, VAR_DIR

# The cloud. `simulated` keeps a cloud inside the portal's database; `ec2` talks to AWS.
PORTAL_PROVIDER = env_str("PORTAL_PROVIDER", "simulated")
PORTAL_PROVIDERS = {
    "simulated": "instances.providers.simulated.SimulatedProvider",
    "ec2": "instances.providers.ec2.EC2Provider",
}
PORTAL_REGION = env_str("PORTAL_REGION", "us-east-1")
PORTAL_PRICE_FILE = Path(
    env_str("PORTAL_PRICE_FILE", str(BASE_DIR / "instances" / "data" / "prices.json"))
)
# TensorFlow images and their ids per region (sync_catalog). The shipped file's ids are the
# simulated cloud's; on EC2, point this at a file of your own AMIs or set them in the admin.
PORTAL_IMAGE_FILE = Path(
    env_str("PORTAL_IMAGE_FILE", str(BASE_DIR / "instances" / "data" / "images.json"))
)
PORTAL_SIMULATED_SEED = env_int("PORTAL_SIMULATED_SEED", 7)
# Seconds a simulated host takes to boot (stopping and terminating take a fraction of it).
PORTAL_SIMULATED_BOOT_SECONDS = env_int("PORTAL_SIMULATED_BOOT_SECONDS", 6)
# Seconds every simulated cloud call takes; the chaos tests raise it to widen crash windows.
PORTAL_SIMULATED_API_LATENCY_SECONDS = env_float("PORTAL_SIMULATED_API_LATENCY_SECONDS", 0)
# Chance per hour that the simulated market takes back a running spot host.
PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR = env_float("PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR", 0)
# Faults of the simulated cloud, all off by default (instances.providers.faults.Faults):
# seconds a host call's reply takes after the cloud acted; the chance a launch, stop, start or
# terminate takes effect and then times out; launches that ignore the ClientToken (as moto);
# the chance a call starts a throttling burst, and how many calls a burst refuses.
PORTAL_SIMULATED_REPLY_LATENCY_SECONDS = env_float("PORTAL_SIMULATED_REPLY_LATENCY_SECONDS", 0)
PORTAL_SIMULATED_LOST_REPLY_RATE = env_float("PORTAL_SIMULATED_LOST_REPLY_RATE", 0)
PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS = env_bool("PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS", False)
PORTAL_SIMULATED_THROTTLE_RATE = env_float("PORTAL_SIMULATED_THROTTLE_RATE", 0)
PORTAL_SIMULATED_THROTTLE_BURST_CALLS = env_int("PORTAL_SIMULATED_THROTTLE_BURST_CALLS", 5)
AWS_EC2_INSTANCE_TYPES = env_list(
    "AWS_EC2_INSTANCE_TYPES",
    "g5.xlarge,g6.xlarge,g6e.xlarge,p4d.24xlarge,p4de.24xlarge,p5.48xlarge,p5e.48xlarge",
)
AWS_ENDPOINT_URL = env_str("AWS_ENDPOINT_URL")
# One subnet per availability zone, in order of preference: a launch that finds no capacity in
# one zone tries the next, and a spot replacement tries the zone that lost its host last.
# PORTAL_EC2_SUBNET_ID (one subnet) is still read when the list is not set.
PORTAL_EC2_SUBNET_IDS = env_list("PORTAL_EC2_SUBNET_IDS", env_str("PORTAL_EC2_SUBNET_ID"))
PORTAL_EC2_SECURITY_GROUP_IDS = env_list("PORTAL_EC2_SECURITY_GROUP_IDS")
PORTAL_EC2_INSTANCE_PROFILE = env_str("PORTAL_EC2_INSTANCE_PROFILE")
PORTAL_EC2_KMS_KEY_ID = env_str("PORTAL_EC2_KMS_KEY_ID")
PORTAL_EC2_ROOT_VOLUME_GB = env_int("PORTAL_EC2_ROOT_VOLUME_GB", 200)

# GPU telemetry and the idle stop (instances/services/telemetry.py, idle.py).
# How often readings are gathered from the simulated cloud and idle hosts are looked for.
PORTAL_TELEMETRY_SECONDS = env_int("PORTAL_TELEMETRY_SECONDS", 60)
PORTAL_IDLE_CHECK_SECONDS = env_int("PORTAL_IDLE_CHECK_SECONDS", 60)
# Minute readings are kept this long, then folded into hourly ones.
PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS = env_int("PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS", 48)
# A reading up to this far ahead of the portal's clock is clamped to now; further is refused.
PORTAL_TELEMETRY_MAX_SKEW_SECONDS = env_int("PORTAL_TELEMETRY_MAX_SKEW_SECONDS", 120)
# A host whose latest reading is older than this has no recent telemetry: never judged idle.
PORTAL_TELEMETRY_FRESH_MINUTES = env_int("PORTAL_TELEMETRY_FRESH_MINUTES", 3)
# Where a host's agent posts its readings (the portal's address as the hosts reach it).
PORTAL_AGENT_URL = env_str("PORTAL_AGENT_URL", "http://localhost:8000")

# Orders.
PORTAL_LEASE_DEFAULT_HOURS = env_int("PORTAL_LEASE_DEFAULT_HOURS", 24)
PORTAL_LEASE_MAX_HOURS = env_int("PORTAL_LEASE_MAX_HOURS", 168)
# How many hours before a lease ends its owner is warned (a notice and an email, once each).
try:
    PORTAL_LEASE_NOTICE_HOURS = sorted(
        {int(value) for value in env_list("PORTAL_LEASE_NOTICE_HOURS", "24,1")}, reverse=True
    )
except ValueError:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "PORTAL_LEASE_NOTICE_HOURS must be whole hours separated by commas, e.g. 24,1."
    ) from None
PORTAL_ORDER_MAX_COUNT = env_int("PORTAL_ORDER_MAX_COUNT", 8)
# Checks order_submit runs under the project lock, in order (quota, budget, ...); each is a
# callable(order_request) that raises to refuse.
ORDER_ADMISSION_CHECKS: list[str] = ["instances.services.quotas.quota_check"]
# What an order page and the approval inbox show before an order is placed or approved: the
# headroom of each limit, callable(order_request) -> list[instances.selectors.headroom.Headroom].
ORDER_HEADROOM: list[str] = ["instances.services.quotas.quota_headroom"]
# Quotas are defined in portal and counted in instances: callable(keys) -> {key: Usage} for many
# (project id, member id or None) keys at once; and callable(values) -> (values, problems)
# checks of the names a quota's limits use, run before a quota is saved.
PORTAL_QUOTA_USAGE = "instances.selectors.quotas.live_usage"
PORTAL_QUOTA_VALIDATORS: list[str] = ["instances.services.quotas.quota_catalog_problems"]
# Run when a project's limits change (its quota set or removed, its budget set or removed), in
# the changing transaction: callable(project=...). The pools held by a refusal retry at once.
PORTAL_LIMITS_MOVED: list[str] = ["instances.services.pools_retry_now"]
# The names the Quotas page offers in its rows: callable() -> portal.quota_rows.QuotaChoices.
PORTAL_QUOTA_CHOICES = "instances.selectors.quotas.quota_choices"
# The badge on the Approvals link: callable(user) -> how many held orders the user may decide.
PORTAL_APPROVALS_WAITING = "instances.selectors.orders.orders_to_decide_count"
# The dashboard's panels, in order: callable(user, projects) -> portal.panels.Panel.
PORTAL_DASHBOARD_PANELS: list[str] = [
    "instances.panels.operations_panel",
    "instances.panels.summary_panel",
    "instances.panels.quota_panel",
    "instances.panels.hosts_panel",
    "instances.panels.pools_panel",
]
# Days an order may wait for approval before it expires (a project's policy may say otherwise).
PORTAL_APPROVAL_EXPIRY_DAYS = env_int("PORTAL_APPROVAL_EXPIRY_DAYS", 3)
# Personal API tokens: default and longest lifetime, in days.
PORTAL_TOKEN_DEFAULT_DAYS = env_int("PORTAL_TOKEN_DEFAULT_DAYS", 30)
PORTAL_TOKEN_MAX_DAYS = env_int("PORTAL_TOKEN_MAX_DAYS", 90)

# Provisioning: retries of transient cloud errors, and the reconciler's thresholds.
PORTAL_PROVISION_MAX_RETRIES = env_int("PORTAL_PROVISION_MAX_RETRIES", 5)
PORTAL_PROVISION_RETRY_BACKOFF_SECONDS = env_int("PORTAL_PROVISION_RETRY_BACKOFF_SECONDS", 5)
PORTAL_RECONCILE_SECONDS = env_int("PORTAL_RECONCILE_SECONDS", 30)
PORTAL_RECONCILE_STUCK_SECONDS = env_int("PORTAL_RECONCILE_STUCK_SECONDS", 120)
# How many times reconcile sends lost work again before it gives up (a launch then fails).
PORTAL_RECONCILE_MAX_RETRIES = env_int("PORTAL_RECONCILE_MAX_RETRIES", 5)
PORTAL_ORPHAN_GRACE_SECONDS = env_int("PORTAL_ORPHAN_GRACE_SECONDS", 300)
# A host the cloud does not list is a ghost only after this long unseen (describe lags launch).
PORTAL_GHOST_GRACE_SECONDS = env_int("PORTAL_GHOST_GRACE_SECONDS", 180)
# Tagged on every cloud resource; reconcile touches only hosts of its own deployment, so that
# staging and production may share an account.
PORTAL_DEPLOYMENT = env_str("PORTAL_DEPLOYMENT", "default")

# Spot recovery (instances.services.spot_recovery). The SQS queue an EventBridge rule feeds with
# EC2's "Spot Instance Interruption Warning" and "Instance Rebalance Recommendation" events (empty:
# the portal reads the simulated cloud's warnings directly, and reconcile catches interruptions),
# the endpoint to reach it at (moto, LocalStack), and how often beat drains it.
PORTAL_SPOT_EVENTS_QUEUE_URL = env_str("PORTAL_SPOT_EVENTS_QUEUE_URL")
PORTAL_SPOT_EVENTS_ENDPOINT_URL = env_str("PORTAL_SPOT_EVENTS_ENDPOINT_URL")
PORTAL_SPOT_EVENTS_SECONDS = env_int("PORTAL_SPOT_EVENTS_SECONDS", 10)
# How long before it takes a spot host back the simulated cloud warns (EC2: about two minutes).
PORTAL_SPOT_WARNING_LEAD_SECONDS = env_int("PORTAL_SPOT_WARNING_LEAD_SECONDS", 120)
# Most replacement hosts one order may launch (relaunch_spot, fallback_on_demand).
PORTAL_SPOT_MAX_REPLACEMENTS = env_int("PORTAL_SPOT_MAX_REPLACEMENTS", 3)
# Pools (instances/services/pools/): the largest max_size, the autoscaler's beat period, the
# backoff of a refused scale-out (doubling from the first figure up to the second), how long a
# market and type without capacity is left alone, how long before its lease ends a pool host's
# replacement launches, and how long the per-pass samples behind the pool chart are kept.
PORTAL_POOL_MAX_SIZE = env_int("PORTAL_POOL_MAX_SIZE", 64)
PORTAL_AUTOSCALE_SECONDS = env_int("PORTAL_AUTOSCALE_SECONDS", 60)
PORTAL_POOL_BACKOFF_SECONDS = env_int("PORTAL_POOL_BACKOFF_SECONDS", 60)
PORTAL_POOL_BACKOFF_MAX_SECONDS = env_int("PORTAL_POOL_BACKOFF_MAX_SECONDS", 900)
PORTAL_POOL_CAPACITY_HOLD_SECONDS = env_int("PORTAL_POOL_CAPACITY_HOLD_SECONDS", 300)
PORTAL_POOL_LEASE_HANDOVER_SECONDS = env_int("PORTAL_POOL_LEASE_HANDOVER_SECONDS", 1800)
PORTAL_POOL_SAMPLE_RETENTION_DAYS = env_int("PORTAL_POOL_SAMPLE_RETENTION_DAYS", 14)
# Scheduled actions a pool may have: each is read on every view of the pool and every pass.
PORTAL_POOL_MAX_SCHEDULES = env_int("PORTAL_POOL_MAX_SCHEDULES", 20)
# Checkpoints: an S3 prefix under which each order gets <project>/<order>/ (s3://bucket/prefix);
# empty on the simulated cloud means a local folder under PORTAL_CHECKPOINT_LOCAL_DIR.
PORTAL_CHECKPOINT_S3_PREFIX = env_str("PORTAL_CHECKPOINT_S3_PREFIX")
PORTAL_CHECKPOINT_LOCAL_DIR = Path(
    env_str("PORTAL_CHECKPOINT_LOCAL_DIR", str(VAR_DIR / "checkpoints"))
)
