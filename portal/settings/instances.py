"""The cloud, GPU telemetry and the idle stop, orders and their hooks, provisioning, spot
recovery, pools and checkpoints (the instances app's knobs), and its periodic tasks."""

from __future__ import annotations

import os
from pathlib import Path

from portal.lib.env import env_bool, env_float, env_int, env_list, env_str
from portal.settings.base import BASE_DIR, CELERY_BEAT_SCHEDULE, VAR_DIR

# The cloud. `simulated` keeps a cloud inside the portal's database; `ec2` talks to AWS.
PORTAL_PROVIDER = env_str(
    "PORTAL_PROVIDER",
    "simulated",
    help="The cloud: simulated (a cloud inside the portal's database, for the demo and the "
    "tests) or ec2 (AWS through boto3; credentials come the usual boto3 way).",
)
PORTAL_PROVIDERS = {
    "simulated": "instances.providers.simulated.SimulatedProvider",
    "ec2": "instances.providers.ec2.EC2Provider",
}
PORTAL_REGION = env_str(
    "PORTAL_REGION",
    "us-east-1",
    help="The region hosts run in and whose prices and image ids the catalog uses.",
)
PORTAL_PRICE_FILE = Path(
    env_str(
        "PORTAL_PRICE_FILE",
        str(BASE_DIR / "instances" / "data" / "prices.json"),
        help="The JSON file sync_catalog reads list prices from (prices come only from it, "
        "with its source and date); edit it and run sync_catalog to change a price.",
    )
)
# TensorFlow images and their ids per region (sync_catalog). The shipped file's ids are the
# simulated cloud's; on EC2, point this at a file of your own AMIs or set them in the admin.
PORTAL_IMAGE_FILE = Path(
    env_str(
        "PORTAL_IMAGE_FILE",
        str(BASE_DIR / "instances" / "data" / "images.json"),
        help="The JSON file sync_catalog reads TensorFlow images and their ids per region "
        "from. The shipped file's ids exist only in the simulated cloud: on EC2 point this at "
        "a file of your own AMIs, or set ids in the admin.",
    )
)
PORTAL_SIMULATED_SEED = env_int(
    "PORTAL_SIMULATED_SEED",
    7,
    help="Seed of the simulated cloud: the same seed and clock give the same spot prices, "
    "boot delays, interruptions and faults.",
)
# Seconds a simulated host takes to boot (stopping and terminating take a fraction of it).
PORTAL_SIMULATED_BOOT_SECONDS = env_int(
    "PORTAL_SIMULATED_BOOT_SECONDS",
    6,
    help="Seconds a simulated host takes to boot; stopping and terminating take a fraction of "
    "it (tests set 0).",
)
# Seconds every simulated cloud call takes; the chaos tests raise it to widen crash windows.
PORTAL_SIMULATED_API_LATENCY_SECONDS = env_float(
    "PORTAL_SIMULATED_API_LATENCY_SECONDS",
    0,
    help="Seconds every simulated cloud call takes before the cloud acts (the chaos tests "
    "raise it to widen crash windows).",
)
# Chance per hour that the simulated market takes back a running spot host.
PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR = env_float(
    "PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR",
    0,
    help="Chance per hour that the simulated market takes back a running spot host (0: only "
    "when simulated_cloud warn or interrupt says so).",
)
# Faults of the simulated cloud, all off by default (instances.providers.faults.Faults):
# seconds a host call's reply takes after the cloud acted; the chance a launch, stop, start or
# terminate takes effect and then times out; launches that ignore the ClientToken (as moto);
# the chance a call starts a throttling burst, and how many calls a burst refuses.
PORTAL_SIMULATED_REPLY_LATENCY_SECONDS = env_float(
    "PORTAL_SIMULATED_REPLY_LATENCY_SECONDS",
    0,
    help="Fault: seconds a simulated host call's reply takes after the cloud acted (the host "
    "exists while the answer is on its way).",
)
PORTAL_SIMULATED_LOST_REPLY_RATE = env_float(
    "PORTAL_SIMULATED_LOST_REPLY_RATE",
    0,
    help="Fault: chance (0 to 1) that a launch, stop, start or terminate takes effect and the "
    "reply is then lost (a ReadTimeoutError, transient).",
)
PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS = env_bool(
    "PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS",
    False,
    help="Fault: 1 makes the same ClientToken launch another host, as moto does; 0 honours it "
    "as EC2 does.",
)
PORTAL_SIMULATED_THROTTLE_RATE = env_float(
    "PORTAL_SIMULATED_THROTTLE_RATE",
    0,
    help="Fault: chance (0 to 1) that a host call starts a burst of RequestLimitExceeded "
    "(transient) before anything happens.",
)
PORTAL_SIMULATED_THROTTLE_BURST_CALLS = env_int(
    "PORTAL_SIMULATED_THROTTLE_BURST_CALLS",
    5,
    help="Fault: how many calls in a row a throttling burst refuses.",
)
AWS_EC2_INSTANCE_TYPES = env_list(
    "AWS_EC2_INSTANCE_TYPES",
    "g5.xlarge,g6.xlarge,g6e.xlarge,p4d.24xlarge,p4de.24xlarge,p5.48xlarge,p5e.48xlarge",
    help="The EC2 instance types sync_catalog asks describe_instance_types about.",
)
AWS_ENDPOINT_URL = env_str(
    "AWS_ENDPOINT_URL",
    help="Another EC2 endpoint (a moto server in tests); empty means AWS itself.",
)
# One subnet per availability zone, in order of preference: a launch that finds no capacity in
# one zone tries the next, and a spot replacement tries the zone that lost its host last.
# PORTAL_EC2_SUBNET_ID (one subnet) is still read when the list is not set.
PORTAL_EC2_SUBNET_IDS = env_list(
    "PORTAL_EC2_SUBNET_IDS",
    env_str(
        "PORTAL_EC2_SUBNET_ID",
        help="One subnet, read only when PORTAL_EC2_SUBNET_IDS is not set (the setting "
        "before zones).",
    ),
    help="Subnets hosts launch in, one per availability zone in order of preference: a "
    "launch with no capacity in one zone tries the next, and a spot replacement tries the "
    "zone that lost its host last. Empty: the default VPC.",
    doc_default="the value of PORTAL_EC2_SUBNET_ID",
)
PORTAL_EC2_SECURITY_GROUP_IDS = env_list(
    "PORTAL_EC2_SECURITY_GROUP_IDS", help="Security groups of the EC2 hosts."
)
PORTAL_EC2_INSTANCE_PROFILE = env_str(
    "PORTAL_EC2_INSTANCE_PROFILE",
    help="The instance profile (name or ARN) EC2 hosts run as.",
)
PORTAL_EC2_KMS_KEY_ID = env_str(
    "PORTAL_EC2_KMS_KEY_ID",
    help="KMS key of the hosts' encrypted gp3 root volume; empty: the account's default EBS key.",
)
PORTAL_EC2_ROOT_VOLUME_GB = env_int(
    "PORTAL_EC2_ROOT_VOLUME_GB", 200, help="Size of an EC2 host's root volume, in GB."
)

# GPU telemetry and the idle stop (instances/services/telemetry.py, idle.py).
# How often readings are gathered from the simulated cloud and idle hosts are looked for.
PORTAL_TELEMETRY_SECONDS = env_int(
    "PORTAL_TELEMETRY_SECONDS",
    60,
    help="How often beat gathers GPU readings from the simulated cloud (host agents post their "
    "own).",
)
PORTAL_IDLE_CHECK_SECONDS = env_int(
    "PORTAL_IDLE_CHECK_SECONDS", 60, help="How often beat runs the idle-stop pass."
)
# Minute readings are kept this long, then folded into hourly ones.
PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS = env_int(
    "PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS",
    48,
    help="Hours minute readings are kept before they are folded into hourly ones; an older "
    "reading is refused.",
)
# A reading up to this far ahead of the portal's clock is clamped to now; further is refused.
PORTAL_TELEMETRY_MAX_SKEW_SECONDS = env_int(
    "PORTAL_TELEMETRY_MAX_SKEW_SECONDS",
    120,
    help="A reading up to this many seconds ahead of the portal's clock is clamped to now; "
    "further ahead is refused.",
)
# A host whose latest reading is older than this has no recent telemetry: never judged idle.
PORTAL_TELEMETRY_FRESH_MINUTES = env_int(
    "PORTAL_TELEMETRY_FRESH_MINUTES",
    3,
    help="A host whose newest reading is older than this many minutes has no current reading "
    "(and is never judged idle).",
)
# Where a host's agent posts its readings (the portal's address as the hosts reach it).
PORTAL_AGENT_URL = env_str(
    "PORTAL_AGENT_URL",
    # make run's own server, where the simulated cloud's agents reach it.
    f"http://127.0.0.1:{os.environ.get('PORTAL_PORT', '8000')}",
    help="The portal's address as the hosts reach it: the agent cloud-init installs on EC2 "
    "hosts, and the simulated hosts' agents.",
    doc_default="http://127.0.0.1:$PORTAL_PORT (8000)",
)

# Orders.
PORTAL_LEASE_DEFAULT_HOURS = env_int(
    "PORTAL_LEASE_DEFAULT_HOURS",
    24,
    help="Lease of a host, in hours, when the order does not say; the host is terminated when "
    "its lease ends.",
)
PORTAL_LEASE_MAX_HOURS = env_int(
    "PORTAL_LEASE_MAX_HOURS",
    168,
    help="The longest lease, in hours from when a host first runs, extensions included (a "
    "quota's max lease may be shorter).",
)
# How many hours before a lease ends its owner is warned (a notice and an email, once each).
try:
    PORTAL_LEASE_NOTICE_HOURS = sorted(
        {
            int(value)
            for value in env_list(
                "PORTAL_LEASE_NOTICE_HOURS",
                "24,1",
                help="Hours before a lease ends that its owner gets a notice and an email "
                "(each once; whole hours).",
            )
        },
        reverse=True,
    )
except ValueError:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "PORTAL_LEASE_NOTICE_HOURS must be whole hours separated by commas, e.g. 24,1."
    ) from None
PORTAL_LEASE_WARN_SECONDS = env_int(
    "PORTAL_LEASE_WARN_SECONDS", 60, help="How often beat looks for lease warnings to send."
)
PORTAL_ORDER_MAX_COUNT = env_int(
    "PORTAL_ORDER_MAX_COUNT", 8, help="The most hosts one order may ask for."
)
PORTAL_CLUSTER_MAX_NODES = env_int(
    "PORTAL_CLUSTER_MAX_NODES",
    16,
    help="The most nodes one cluster order may ask for (a cluster has at least 2).",
)
PORTAL_CLUSTER_PORT = env_int(
    "PORTAL_CLUSTER_PORT",
    12345,
    help="The port each EC2 cluster node's TensorFlow worker listens on, as TF_CONFIG names it "
    "(the cluster's security group opens every port between its nodes).",
)
# Days an order may wait for approval before it expires (a project's policy may say otherwise).
PORTAL_APPROVAL_EXPIRY_DAYS = env_int(
    "PORTAL_APPROVAL_EXPIRY_DAYS",
    3,
    help="Days a held order waits for a decision before it expires when its project has no "
    "approval policy; a policy's own expire_after_days (3 unless changed) wins.",
)
# Personal API tokens: default and longest lifetime, in days.
PORTAL_TOKEN_DEFAULT_DAYS = env_int(
    "PORTAL_TOKEN_DEFAULT_DAYS",
    30,
    help="Days a personal API token lives when its owner does not say.",
)
PORTAL_TOKEN_MAX_DAYS = env_int(
    "PORTAL_TOKEN_MAX_DAYS", 90, help="The longest life of a personal API token, in days."
)

# Provisioning: retries of transient cloud errors, and the reconciler's thresholds.
PORTAL_PROVISION_MAX_RETRIES = env_int(
    "PORTAL_PROVISION_MAX_RETRIES",
    5,
    help="Attempts at a launch the cloud refuses for a passing reason (throttling, no "
    "capacity) before the host fails with the reason.",
)
PORTAL_PROVISION_RETRY_BACKOFF_SECONDS = env_int(
    "PORTAL_PROVISION_RETRY_BACKOFF_SECONDS",
    5,
    help="The first wait before such a retry, in seconds; it doubles each time, up to 300.",
)
PORTAL_RECONCILE_SECONDS = env_int(
    "PORTAL_RECONCILE_SECONDS", 30, help="Seconds between reconcile passes (beat)."
)
PORTAL_RECONCILE_STUCK_SECONDS = env_int(
    "PORTAL_RECONCILE_STUCK_SECONDS",
    120,
    help="Seconds work may sit unfinished (its task lost) before reconcile sends it again.",
)
# How many times reconcile sends lost work again before it gives up (a launch then fails).
PORTAL_RECONCILE_MAX_RETRIES = env_int(
    "PORTAL_RECONCILE_MAX_RETRIES",
    5,
    help="How often reconcile re-sends lost work: then a launch fails with the reason, and a "
    "stop, start or terminate is handed to the admins and the owner in a notice.",
)
PORTAL_MIG_HOST_EMPTY_MINUTES = env_int(
    "PORTAL_MIG_HOST_EMPTY_MINUTES",
    30,
    help="Minutes a shared MIG host may run with no slice on it before the portal ends it "
    "(a slice ordered meanwhile is placed on it at once).",
)
PORTAL_ORPHAN_GRACE_SECONDS = env_int(
    "PORTAL_ORPHAN_GRACE_SECONDS",
    300,
    help="Seconds a host tagged by this portal but with no live row may run before reconcile "
    "terminates it as an orphan.",
)
# A host the cloud does not list is a ghost only after this long unseen (describe lags launch).
PORTAL_GHOST_GRACE_SECONDS = env_int(
    "PORTAL_GHOST_GRACE_SECONDS",
    180,
    help="Seconds a live host may be missing from the cloud's answers before it is marked "
    "terminated (a ghost).",
)
# Tagged on every cloud resource; reconcile touches only hosts of its own deployment, so that
# staging and production may share an account.
PORTAL_DEPLOYMENT = env_str(
    "PORTAL_DEPLOYMENT",
    "default",
    help="The portal:deployment tag on every cloud resource; reconcile adopts and terminates "
    "only hosts carrying its own value, so staging and production may share an account.",
)

# Spot recovery (instances.services.spot_recovery). The SQS queue an EventBridge rule feeds with
# EC2's "Spot Instance Interruption Warning" and "Instance Rebalance Recommendation" events (empty:
# the portal reads the simulated cloud's warnings directly, and reconcile catches interruptions),
# the endpoint to reach it at (moto, LocalStack), and how often beat drains it.
PORTAL_SPOT_EVENTS_QUEUE_URL = env_str(
    "PORTAL_SPOT_EVENTS_QUEUE_URL",
    help="The SQS queue an EventBridge rule feeds with EC2's spot interruption warnings and "
    "rebalance recommendations. Empty: the simulated cloud's warnings are read directly, and "
    "reconcile catches interruptions nobody warned of.",
)
PORTAL_SPOT_EVENTS_ENDPOINT_URL = env_str(
    "PORTAL_SPOT_EVENTS_ENDPOINT_URL",
    help="Another endpoint for that queue (moto, LocalStack); empty means AWS itself.",
)
PORTAL_SPOT_EVENTS_SECONDS = env_int(
    "PORTAL_SPOT_EVENTS_SECONDS", 10, help="How often beat drains the spot warnings."
)
# How long before it takes a spot host back the simulated cloud warns (EC2: about two minutes).
PORTAL_SPOT_WARNING_LEAD_SECONDS = env_int(
    "PORTAL_SPOT_WARNING_LEAD_SECONDS",
    120,
    help="Seconds between the simulated cloud's interruption warning and the interruption "
    "(EC2 gives about two minutes).",
)
PORTAL_SPOT_MAX_REPLACEMENTS = env_int(
    "PORTAL_SPOT_MAX_REPLACEMENTS",
    3,
    help="The most replacement hosts one order launches (relaunch_spot, fallback_on_demand); "
    "for a job's order, the most that never ran (its max_recoveries and time limit bound the "
    "rest).",
)
# Pools (instances/services/pools/): the largest max_size, the autoscaler's
# beat period, the backoff of a refused scale-out (doubling from the first figure up to the
# second), how long a market and type without capacity is left alone, how long before its lease
# ends a pool host's replacement launches, and how long the per-pass samples behind the pool
# chart are kept.
PORTAL_POOL_MAX_SIZE = env_int("PORTAL_POOL_MAX_SIZE", 64, help="The largest max_size of a pool.")
PORTAL_AUTOSCALE_SECONDS = env_int(
    "PORTAL_AUTOSCALE_SECONDS", 60, help="How often beat runs the autoscaler pass over pools."
)
PORTAL_POOL_BACKOFF_SECONDS = env_int(
    "PORTAL_POOL_BACKOFF_SECONDS",
    60,
    help="Seconds a scale-out a quota or budget refused waits in the refused market; the wait "
    "doubles with each refusal.",
)
PORTAL_POOL_BACKOFF_MAX_SECONDS = env_int(
    "PORTAL_POOL_BACKOFF_MAX_SECONDS",
    900,
    help="The longest such wait, in seconds.",
)
PORTAL_POOL_CAPACITY_HOLD_SECONDS = env_int(
    "PORTAL_POOL_CAPACITY_HOLD_SECONDS",
    300,
    help="Seconds a market and type the cloud had no capacity for is not tried again by a pool.",
)
PORTAL_POOL_LEASE_HANDOVER_SECONDS = env_int(
    "PORTAL_POOL_LEASE_HANDOVER_SECONDS",
    1800,
    help="A pool host whose lease ends within this many seconds (or half its lease, when "
    "shorter) counts as leaving: its replacement launches, and it ends once the replacement "
    "runs.",
)
PORTAL_POOL_SAMPLE_RETENTION_DAYS = env_int(
    "PORTAL_POOL_SAMPLE_RETENTION_DAYS",
    14,
    help="Days the per-pass samples behind a pool's chart are kept.",
)
# Scheduled actions a pool may have: each is read on every view of the pool and every pass.
PORTAL_POOL_MAX_SCHEDULES = env_int(
    "PORTAL_POOL_MAX_SCHEDULES",
    20,
    help="Scheduled actions one pool may have; one more answers 409 too_many_schedules.",
)
# Checkpoints: an S3 prefix under which each order gets <project>/<order>/ (s3://bucket/prefix);
# empty on the simulated cloud means a local folder under PORTAL_CHECKPOINT_LOCAL_DIR.
PORTAL_CHECKPOINT_S3_PREFIX = env_str(
    "PORTAL_CHECKPOINT_S3_PREFIX",
    help="Where each order's checkpoints go, as <prefix>/<project>/<order>/ (e.g. "
    "s3://my-bucket/checkpoints); handed to its hosts as PORTAL_CHECKPOINT_URI.",
)
PORTAL_CHECKPOINT_LOCAL_DIR = Path(
    env_str(
        "PORTAL_CHECKPOINT_LOCAL_DIR",
        str(VAR_DIR / "checkpoints"),
        help="The local folder that stands in for the S3 prefix on the simulated cloud when "
        "PORTAL_CHECKPOINT_S3_PREFIX is empty.",
    )
)

# Managed jobs (instances/services/jobs/).
PORTAL_JOB_LOG_CAP_BYTES = env_int(
    "PORTAL_JOB_LOG_CAP_BYTES",
    16 * 1024 * 1024,
    help="Bytes of a job's output the portal keeps; the rest stays in the log file on its "
    "host, and the job page says so.",
)
PORTAL_JOB_WORKDIR_MAX_BYTES = env_int(
    "PORTAL_JOB_WORKDIR_MAX_BYTES",
    512 * 1024,
    help="The largest working folder a job may upload (a tar archive, gzipped or not), in "
    "bytes; a larger project goes in a git repository the job names instead.",
)
PORTAL_JOB_MAX_TIME_LIMIT_MINUTES = env_int(
    "PORTAL_JOB_MAX_TIME_LIMIT_MINUTES",
    PORTAL_LEASE_MAX_HOURS * 60,
    help="The longest time limit a job may ask for, in minutes (at most the longest lease).",
    doc_default="PORTAL_LEASE_MAX_HOURS x 60",
)
PORTAL_JOB_SECONDS = env_int(
    "PORTAL_JOB_SECONDS",
    15,
    help="How often the job pass runs (time limits, lost hosts, kept hosts), in seconds.",
)
PORTAL_TENSORBOARD_APPS = env_int(
    "PORTAL_TENSORBOARD_APPS",
    8,
    help="Jobs' TensorBoards one web process keeps built (the least recently opened is "
    "forgotten first, and built again when next opened).",
)
PORTAL_TENSORBOARD_RELOAD_SECONDS = env_int(
    "PORTAL_TENSORBOARD_RELOAD_SECONDS",
    10,
    help="How long a job's TensorBoard answers from what it read before it reads its log "
    "folder again, in seconds.",
)
# JupyterLab on a host (instances/services/notebooks.py).
PORTAL_NOTEBOOK_START_SECONDS = env_int(
    "PORTAL_NOTEBOOK_START_SECONDS",
    60,
    help="How long a worker waits for a host's JupyterLab to answer before the notebook fails.",
)
PORTAL_EC2_NOTEBOOKS = env_bool(
    "PORTAL_EC2_NOTEBOOKS",
    False,
    help="Offer JupyterLab through the portal on EC2 hosts: each host's agent serves it on "
    "PORTAL_NOTEBOOK_PORT and the portal reaches it at the host's private address, so the portal "
    "must run in the hosts' VPC and their security group must let it in on that port "
    "(docs/operations.md). Off: the host page gives the ssh -L recipe instead.",
)
PORTAL_NOTEBOOK_PORT = env_int(
    "PORTAL_NOTEBOOK_PORT",
    8888,
    help="The port an EC2 host's agent serves JupyterLab on, for the portal's proxy only.",
)
PORTAL_NOTEBOOK_MAX_BODY_BYTES = env_int(
    "PORTAL_NOTEBOOK_MAX_BODY_BYTES",
    100 * 1024 * 1024,
    help="The largest request body sent through to a host's JupyterLab (a notebook saved with "
    "its plots, a file uploaded into it), in bytes; a larger one answers 413. Everywhere else "
    "DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE holds.",
)
PORTAL_SIMULATED_AGENTS = env_bool(
    "PORTAL_SIMULATED_AGENTS",
    True,
    help="Start a real host agent on this machine for each simulated host that runs a job, so "
    "the job's command runs here (off: nothing runs a job until an agent speaks for its host).",
)
CELERY_BEAT_SCHEDULE.update(
    {
        "reconcile-instances": {
            "task": "instances.tasks.reconcile",
            "schedule": PORTAL_RECONCILE_SECONDS,
        },
        "expire-leases": {"task": "instances.tasks.expire_leases", "schedule": 60},
        "warn-leases": {
            "task": "instances.tasks.warn_leases",
            "schedule": PORTAL_LEASE_WARN_SECONDS,
        },
        "expire-orders": {"task": "instances.tasks.expire_orders", "schedule": 3600},
        "collect-telemetry": {
            "task": "instances.tasks.collect_telemetry",
            "schedule": PORTAL_TELEMETRY_SECONDS,
        },
        "compact-telemetry": {"task": "instances.tasks.compact_telemetry", "schedule": 3600},
        "stop-idle-hosts": {
            "task": "instances.tasks.stop_idle_hosts",
            "schedule": PORTAL_IDLE_CHECK_SECONDS,
        },
        "drain-spot-events": {
            "task": "instances.tasks.drain_spot_events",
            "schedule": PORTAL_SPOT_EVENTS_SECONDS,
        },
        "pass-jobs": {"task": "instances.tasks.pass_jobs", "schedule": PORTAL_JOB_SECONDS},
        "autoscale-pools": {
            "task": "instances.tasks.autoscale",
            "schedule": PORTAL_AUTOSCALE_SECONDS,
        },
    }
)
