"""The instances app's pages: catalog, ordering, My hosts, a host, the approval inbox."""

from django.urls import path

from instances import host_pages, order_page, views

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
]
