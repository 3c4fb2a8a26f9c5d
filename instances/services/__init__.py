"""instances/services/: the writers of the catalog, orders and hosts (docs/design.md rule 1:
services are the only writers), one module per topic, every public function re-exported here:

- catalog: instance types and images from the cloud, spot prices seen, price hooks
- orders: estimate, validate, admit and place an order; the hosts it creates
- approvals: approve, reject, cancel, expire held orders; the approval policy
- transitions: the order and host state machines (the only writers of status)
- hosts: what users ask of a host (stop, start, terminate), and hosts the portal ends
- cloud: the worker side, talking to the cloud and recording what it said
- reconcile: the loop that repairs lost and doubled work
- leases: warnings before a lease ends, extensions, hosts whose lease ended
- telemetry: GPU readings in (simulated cloud, host agents), kept per minute then per hour
- idle: the idle stop, its warning and Keep running; the idle policy
- spot_recovery: spot interruption warnings, replacement hosts by the order's policy
- quotas: quotas set and deleted (the one check of their values), requests for more, the
  admission check, its headroom, quota names checked against the catalog
- pools/: lifecycle (create, change, delete, held raises), checks (sizes, the launch order),
  schedules (scheduled actions), plan (pure: what a pass launches and ends) and autoscaler
  (the beat pass that sizes every pool)
- jobs/: managed jobs (imported from there): lifecycle (the job state machine), submit, runs
  (what a host's agent is handed and reports), recovery (and the job pass)
- mig: MIG slices: shared hosts' layouts, placing a slice (launching a shared host when none
  has room), slices following their host, empty shared hosts ending
- queue: sending tasks once a transaction commits

Reads live in instances/selectors/; who may do what in portal/permissions.py.
"""

from __future__ import annotations

from instances.selectors.costs import Estimate, order_estimate, order_quoted_estimate
from instances.services.admission import admission_refusal, order_admit
from instances.services.approvals import (
    APPROVAL_EXPIRY_MAX_DAYS,
    APPROVAL_POLICY_FIELDS,
    approval_policy_set,
    order_approve,
    order_cancel,
    order_reject,
    order_require_decider,
    orders_expire,
)
from instances.services.catalog import (
    CatalogSync,
    SyncReport,
    catalog_sync,
    image_save,
    image_upsert,
    instance_type_record_spot_price,
    instance_type_save,
    instance_type_sync,
)
from instances.services.cloud import (
    FAILURE_ADVICE,
    failure_reason,
    instance_action_refused,
    instance_apply_cloud,
    instance_cloud_action,
    instance_fail,
    instance_provision,
    instance_record_host,
    instance_sync,
    launch_order_key,
    launch_request,
)
from instances.services.hosts import (
    instance_create,
    instance_request_action,
    instance_request_start,
    instance_request_stop,
    instance_request_terminate,
    instances_end,
    instances_request_action,
    order_instances_create,
)
from instances.services.idle import (
    IDLE_POLICY_FIELDS,
    IdleReport,
    idle_check,
    idle_policy_set,
    instance_keep_running,
)
from instances.services.leases import (
    LeaseLimitExceeded,
    instance_extend_lease,
    instance_system_stop,
    leases_expire,
    leases_warn,
)
from instances.services.mig import (
    mig_host_follow,
    mig_hosts_end_empty,
    mig_layout_set,
    mig_slice_place,
    mig_slice_release,
)
from instances.services.notebooks import (
    live_notebook,
    notebook_base_url,
    notebook_close,
    notebook_launch,
    notebook_open,
    notebook_refusal,
)
from instances.services.orders import (
    OrderRequest,
    approval_needed,
    approvers_ask,
    order_request_of,
    order_submit,
    order_validate,
)
from instances.services.pools.autoscaler import AutoscaleReport, autoscale
from instances.services.pools.lifecycle import (
    pool_capacity_refused,
    pool_create,
    pool_delete,
    pool_order_decided,
    pool_set_desired,
    pool_update,
    pools_budget_stop,
    pools_retry_now,
)
from instances.services.pools.schedules import (
    schedule_create,
    schedule_delete,
    schedule_next_runs,
    schedule_update,
    schedule_words,
)
from instances.services.queue import (
    enqueue,
)
from instances.services.quotas import (
    QUOTA_FIELDS,
    QUOTA_REQUEST_GPUS_RULE,
    QUOTA_REQUEST_MOST_GPUS,
    QuotaExceeded,
    limits_moved,
    quota_check,
    quota_delete,
    quota_headroom,
    quota_request_decide,
    quota_request_open,
    quota_request_topic,
    quota_set,
    quota_values_clean,
)
from instances.services.reconcile import (
    GAVE_UP,
    REENQUEUED,
    ReconcileReport,
    reconcile,
)
from instances.services.spot_recovery import (
    instance_interrupted,
    replacement_start,
    spot_capacity_refused,
    spot_events_drain,
    spot_takeback,
    spot_warning_receive,
)
from instances.services.telemetry import (
    GpuShape,
    IngestReport,
    Reading,
    agent_authenticate,
    agent_credential_issue,
    reading_problem,
    readings_ingest,
    telemetry_collect,
    telemetry_compact,
)
from instances.services.transitions import (
    IllegalTransition,
    actor_of,
    audit_change,
    instance_note,
    instance_transition,
    instance_walk,
    order_transition,
)

__all__ = [
    "APPROVAL_EXPIRY_MAX_DAYS",
    "APPROVAL_POLICY_FIELDS",
    "FAILURE_ADVICE",
    "GAVE_UP",
    "IDLE_POLICY_FIELDS",
    "QUOTA_FIELDS",
    "QUOTA_REQUEST_GPUS_RULE",
    "QUOTA_REQUEST_MOST_GPUS",
    "REENQUEUED",
    "AutoscaleReport",
    "CatalogSync",
    "Estimate",
    "GpuShape",
    "IdleReport",
    "IllegalTransition",
    "IngestReport",
    "LeaseLimitExceeded",
    "OrderRequest",
    "QuotaExceeded",
    "Reading",
    "ReconcileReport",
    "SyncReport",
    "actor_of",
    "admission_refusal",
    "agent_authenticate",
    "agent_credential_issue",
    "approval_needed",
    "approval_policy_set",
    "approvers_ask",
    "audit_change",
    "autoscale",
    "catalog_sync",
    "enqueue",
    "failure_reason",
    "idle_check",
    "idle_policy_set",
    "image_save",
    "image_upsert",
    "instance_action_refused",
    "instance_apply_cloud",
    "instance_cloud_action",
    "instance_create",
    "instance_extend_lease",
    "instance_fail",
    "instance_interrupted",
    "instance_keep_running",
    "instance_note",
    "instance_provision",
    "instance_record_host",
    "instance_request_action",
    "instance_request_start",
    "instance_request_stop",
    "instance_request_terminate",
    "instance_sync",
    "instance_system_stop",
    "instance_transition",
    "instance_type_record_spot_price",
    "instance_type_save",
    "instance_type_sync",
    "instance_walk",
    "instances_end",
    "instances_request_action",
    "launch_order_key",
    "launch_request",
    "leases_expire",
    "leases_warn",
    "limits_moved",
    "live_notebook",
    "mig_host_follow",
    "mig_hosts_end_empty",
    "mig_layout_set",
    "mig_slice_place",
    "mig_slice_release",
    "notebook_base_url",
    "notebook_close",
    "notebook_launch",
    "notebook_open",
    "notebook_refusal",
    "order_admit",
    "order_approve",
    "order_cancel",
    "order_estimate",
    "order_instances_create",
    "order_quoted_estimate",
    "order_reject",
    "order_request_of",
    "order_require_decider",
    "order_submit",
    "order_transition",
    "order_validate",
    "orders_expire",
    "pool_capacity_refused",
    "pool_create",
    "pool_delete",
    "pool_order_decided",
    "pool_set_desired",
    "pool_update",
    "pools_budget_stop",
    "pools_retry_now",
    "quota_check",
    "quota_delete",
    "quota_headroom",
    "quota_request_decide",
    "quota_request_open",
    "quota_request_topic",
    "quota_set",
    "quota_values_clean",
    "reading_problem",
    "readings_ingest",
    "reconcile",
    "replacement_start",
    "schedule_create",
    "schedule_delete",
    "schedule_next_runs",
    "schedule_update",
    "schedule_words",
    "spot_capacity_refused",
    "spot_events_drain",
    "spot_takeback",
    "spot_warning_receive",
    "telemetry_collect",
    "telemetry_compact",
]
