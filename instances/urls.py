"""The instances app's pages: catalog, ordering, My hosts, a host, pools, the approval inbox."""

from django.urls import path

from instances import host_pages, order_page, pool_views, views

urlpatterns = [
    path("approvals/", views.approvals, name="approvals"),
    path("approvals/<uuid:pk>/<str:decision>/", views.approval_decide, name="approval-decide"),
    path("catalog/", views.catalog, name="catalog"),
    path("catalog/<str:name>/order/", order_page.order_page, name="order"),
    path(
        "catalog/<str:name>/estimate/",
        order_page.order_estimate_partial,
        name="order-estimate-panel",
    ),
    path("hosts/", host_pages.hosts_page, name="hosts"),
    path("hosts/rows/", host_pages.hosts_rows_partial, name="host-rows"),
    path("hosts/bulk/", host_pages.hosts_bulk, name="hosts-bulk"),
    path("hosts/<uuid:pk>/", host_pages.host_page, name="host"),
    path("hosts/<uuid:pk>/panel/", host_pages.host_panel_partial, name="host-panel"),
    path("hosts/<uuid:pk>/extend/", host_pages.host_extend, name="host-extend"),
    path("hosts/<uuid:pk>/keep-running/", host_pages.host_keep_running, name="host-keep-running"),
    path("hosts/<uuid:pk>/<str:verb>/", host_pages.host_action, name="host-action"),
    path("orders/<uuid:pk>/cancel/", host_pages.held_order_cancel, name="held-order-cancel"),
    path("pools/", pool_views.pools_page, name="pools"),
    path("pools/new/", pool_views.pool_new, name="pool-new"),
    path("pools/new/preview/", pool_views.pool_preview_partial, name="pool-preview"),
    path("pools/<uuid:pk>/", pool_views.pool_page, name="pool"),
    path("pools/<uuid:pk>/panel/", pool_views.pool_panel_partial, name="pool-panel"),
    path("pools/<uuid:pk>/chart/", pool_views.pool_chart_data, name="pool-chart"),
    path("pools/<uuid:pk>/desired/", pool_views.pool_desired, name="pool-desired"),
    path("pools/<uuid:pk>/edit/", pool_views.pool_edit, name="pool-edit"),
    path("pools/<uuid:pk>/delete/", pool_views.pool_remove, name="pool-delete"),
    path("pools/<uuid:pk>/schedules/", pool_views.schedule_add, name="pool-schedule-add"),
    path(
        "pools/<uuid:pk>/schedules/<int:sid>/", pool_views.schedule_edit, name="pool-schedule-edit"
    ),
    path(
        "pools/<uuid:pk>/schedules/<int:sid>/delete/",
        pool_views.schedule_remove,
        name="pool-schedule-delete",
    ),
]
