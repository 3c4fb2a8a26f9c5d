"""The instances app's pages: catalog, ordering, My hosts, a host, the approval inbox."""

from django.urls import path

from instances import order_page, views

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
    path("hosts/", views.hosts_page, name="hosts"),
    path("hosts/rows/", views.hosts_rows_partial, name="host-rows"),
    path("hosts/<uuid:pk>/", views.host_page, name="host"),
    path("hosts/<uuid:pk>/panel/", views.host_panel_partial, name="host-panel"),
    path("hosts/<uuid:pk>/extend/", views.host_extend, name="host-extend"),
    path("hosts/<uuid:pk>/keep-running/", views.host_keep_running, name="host-keep-running"),
    path("hosts/<uuid:pk>/<str:verb>/", views.host_action, name="host-action"),
    path("orders/<uuid:pk>/cancel/", views.held_order_cancel, name="held-order-cancel"),
]
