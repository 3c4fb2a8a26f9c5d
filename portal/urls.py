"""Every route of the portal: pages, the API under /api/v1/, health, admin."""

from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter
from rest_framework.throttling import ScopedRateThrottle

from audit.api import AuditEventViewSet
from billing.api import BudgetViewSet, CostViewSet
from instances.api import (
    ImageViewSet,
    InstanceTypeViewSet,
    InstanceViewSet,
    JobViewSet,
    MigProfileViewSet,
    OrderViewSet,
    PoolViewSet,
    ProjectViewSet,
    QuotaRequestViewSet,
    QuotaViewSet,
)
from instances.api.jobs import host_job_urls
from instances.api.notebooks import host_notebook_urls
from instances.api.telemetry import InstanceMetricsView
from portal.api import TokenViewSet, WebhookViewSet
from portal.lib.sso import CallbackView, SignInView
from portal.views import (
    account,
    dashboard,
    health,
    metrics,
    notices,
    people,
    sso,
    tokens,
    webhooks,
)


class ApiSchemaView(SpectacularAPIView):
    """The OpenAPI schema, open to anyone (see SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]).

    It is generated on every request, seconds of CPU on a busy machine, so callers who are not
    signed in are held to a rate per address (PORTAL_SCHEMA_ANON_RATE); signed-in callers are
    not limited."""

    throttle_scope = "anon-schema"

    def get_throttles(self):
        return [] if self.request.user.is_authenticated else [ScopedRateThrottle()]


class ApiDocsView(SpectacularSwaggerSplitView):
    """Swagger UI for people in a browser, open to anyone, as the schema it shows is (see
    SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]); trying a call needs a token or a session.

    The split view serves Swagger UI's start-up script at ``?script`` rather than inline, and
    the template keeps its page styles in a static file: the CSP allows neither inline."""

    template_name = "portal/api_docs.html"


# No format-suffix routes (``/orders/<id>/approve.json/``): the API speaks JSON, a report's CSV is
# asked for with ``?format=csv``, and the suffixed copies of every action only widened the surface.
router = DefaultRouter()
router.include_format_suffixes = False
router.register("instance-types", InstanceTypeViewSet, basename="instance-type")
router.register("images", ImageViewSet, basename="image")
router.register("mig-profiles", MigProfileViewSet, basename="mig-profile")
router.register("projects", ProjectViewSet, basename="project")
router.register("audit/events", AuditEventViewSet, basename="audit-event")
router.register("orders", OrderViewSet, basename="order")
router.register("instances", InstanceViewSet, basename="instance")
router.register("pools", PoolViewSet, basename="pool")
router.register("jobs", JobViewSet, basename="job")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
router.register("auth/tokens", TokenViewSet, basename="token")
router.register("costs", CostViewSet, basename="cost")
router.register("budgets", BudgetViewSet, basename="budget")
router.register("webhooks", WebhookViewSet, basename="webhook")

urlpatterns = [
    path("", dashboard.home, name="home"),
    path("login/", account.LoginView.as_view(), name="login"),
    path("logout/", account.LogoutView.as_view(), name="logout"),
    path("health/", health.health, name="health"),
    path("metrics", metrics.metrics, name="metrics"),
    path("dashboard/", dashboard.dashboard, name="dashboard"),
    path("account/tokens/", tokens.tokens_page, name="tokens"),
    # Signing in through the provider is for people who are not signed in yet.
    path("oidc/authenticate/", login_not_required(SignInView.as_view()), name="oidc-login"),
    path("oidc/callback/", login_not_required(CallbackView.as_view()), name="oidc-callback"),
    path("sso/", sso.sso_page, name="sso"),
    path("projects/", people.projects_page, name="projects"),
    path("projects/<slug:slug>/", people.project_page, name="project"),
    path("webhooks/", webhooks.webhooks_page, name="webhooks"),
    path("webhooks/<int:pk>/", webhooks.webhook_page, name="webhook"),
    path("notices/", notices.notices_page, name="notices"),
    path("notices/<int:pk>/dismiss/", notices.notice_dismiss_page, name="notice-dismiss"),
    path("", include("instances.urls")),  # catalog, ordering, hosts, approvals, quotas
    path("", include("audit.urls")),
    path("", include("billing.urls")),  # costs, budgets, reconciliation
    path("admin/", admin.site.urls),
    path(
        "api/v1/instances/<uuid:pk>/metrics/",
        InstanceMetricsView.as_view(),
        name="instance-metrics",
    ),
    *host_job_urls(),
    *host_notebook_urls(),
    path("api/v1/", include(router.urls)),
    path("api/v1/schema/", ApiSchemaView.as_view(), name="api-schema"),
    path("api/v1/docs/", ApiDocsView.as_view(url_name="api-schema"), name="api-docs"),
]

# 403 is Django's own view with templates/403.html; 404 is too (templates/404.html) but for
# paths under /api/, which answer the API's JSON error.
handler404 = "portal.views.errors.not_found"
handler500 = "portal.views.errors.server_error"
