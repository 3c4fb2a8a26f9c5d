"""The instances app's pages: catalog, ordering, My hosts, a host and its notebook, jobs, pools,
the approval inbox, the Quotas page and requests for more, and a project's approval and idle
policies; and the websockets a host's notebook uses (websocket_urlpatterns, portal/asgi.py)."""

from django.urls import path

from instances.views import approvals, catalog, hosts, idle, jobs, notebooks, orders, pools, quotas

urlpatterns = [
    path("approvals/", orders.approvals, name="approvals"),
    path("approvals/<uuid:pk>/<str:decision>/", orders.approval_decide, name="approval-decide"),
    path("catalog/", catalog.catalog, name="catalog"),
    path("catalog/<str:name>/order/", orders.order_page, name="order"),
    path(
        "catalog/<str:name>/estimate/",
        orders.order_estimate_partial,
        name="order-estimate-panel",
    ),
    path("hosts/", hosts.hosts_page, name="hosts"),
    path("hosts/rows/", hosts.hosts_rows_partial, name="host-rows"),
    path("hosts/bulk/", hosts.hosts_bulk, name="hosts-bulk"),
    path("hosts/<uuid:pk>/", hosts.host_page, name="host"),
    path("hosts/<uuid:pk>/panel/", hosts.host_panel_partial, name="host-panel"),
    path("hosts/<uuid:pk>/extend/", hosts.host_extend, name="host-extend"),
    path("hosts/<uuid:pk>/keep-running/", hosts.host_keep_running, name="host-keep-running"),
    path("hosts/<uuid:pk>/notebook/", notebooks.host_notebook_open, name="host-notebook"),
    path("hosts/<uuid:pk>/notebook/stop/", notebooks.host_notebook_stop, name="host-notebook-stop"),
    path("hosts/<uuid:pk>/<str:verb>/", hosts.host_action, name="host-action"),
    path("notebook/<uuid:pk>/", notebooks.notebook_proxy, name="notebook"),
    path("notebook/<uuid:pk>/<path:rest>", notebooks.notebook_proxy, name="notebook-path"),
    path("jobs/", jobs.jobs_page, name="jobs"),
    path("jobs/new/", jobs.job_new, name="job-new"),
    path("jobs/<uuid:pk>/", jobs.job_page, name="job"),
    path("jobs/<uuid:pk>/panel/", jobs.job_panel_partial, name="job-panel"),
    path("jobs/<uuid:pk>/log/", jobs.job_log_partial, name="job-log"),
    path("jobs/<uuid:pk>/log.txt", jobs.job_log_file, name="job-log-file"),
    path("jobs/<uuid:pk>/metrics/", jobs.job_scalars_data, name="job-metrics"),
    path("jobs/<uuid:pk>/cancel/", jobs.job_cancel_page, name="job-page-cancel"),
    path("jobs/<uuid:pk>/rerun/", jobs.job_rerun_page, name="job-page-rerun"),
    # The job's TensorBoard: its page, and everything under it (its assets and data).
    path("tensorboard/<uuid:pk>/", jobs.job_tensorboard, name="job-tensorboard"),
    path("tensorboard/<uuid:pk>/<path:rest>", jobs.job_tensorboard, name="job-tensorboard-data"),
    path("font-roboto/<str:name>", jobs.tensorboard_font, name="tensorboard-font"),
    path("orders/<uuid:pk>/cancel/", hosts.held_order_cancel, name="held-order-cancel"),
    path("pools/", pools.pools_page, name="pools"),
    path("pools/new/", pools.pool_new, name="pool-new"),
    path("pools/new/preview/", pools.pool_preview_partial, name="pool-preview"),
    path("pools/<uuid:pk>/", pools.pool_page, name="pool"),
    path("pools/<uuid:pk>/panel/", pools.pool_panel_partial, name="pool-panel"),
    path("pools/<uuid:pk>/chart/", pools.pool_chart_data, name="pool-chart"),
    path("pools/<uuid:pk>/desired/", pools.pool_desired, name="pool-desired"),
    path("pools/<uuid:pk>/edit/", pools.pool_edit, name="pool-edit"),
    path("pools/<uuid:pk>/delete/", pools.pool_remove, name="pool-delete"),
    path("pools/<uuid:pk>/schedules/", pools.schedule_add, name="pool-schedule-add"),
    path("pools/<uuid:pk>/schedules/<int:sid>/", pools.schedule_edit, name="pool-schedule-edit"),
    path(
        "pools/<uuid:pk>/schedules/<int:sid>/delete/",
        pools.schedule_remove,
        name="pool-schedule-delete",
    ),
    path("quotas/", quotas.quotas_page, name="quotas"),
    path(
        "quotas/requests/<int:pk>/<str:decision>/",
        quotas.quota_request_decide_page,
        name="quota-request-answer",
    ),
    path("quotas/<slug:slug>/", quotas.quota_save, name="quota-save"),
    path("quotas/<slug:slug>/request/", quotas.quota_request_page, name="quota-request"),
    path("quotas/<slug:slug>/policy/", quotas.policy_save, name="policy-save"),
    path("projects/<slug:slug>/idle-policy/", idle.idle_policy_page, name="idle-policy"),
    path(
        "projects/<slug:slug>/approval-policy/",
        approvals.approval_policy_page,
        name="approval-policy",
    ),
]

# A host's notebook's kernels and events (JupyterLab's websockets), relayed to the host.
websocket_urlpatterns = [
    path("notebook/<uuid:pk>/<path:rest>", notebooks.NotebookSocket.as_asgi()),
]
