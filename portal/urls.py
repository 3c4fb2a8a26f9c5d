"""Every route of the portal: pages, the API under /api/v1/, health, admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from instances import views as instance_views
from instances.api import ImageViewSet, InstanceTypeViewSet
from portal import views
from portal.api import ProjectViewSet


class ApiDocsView(SpectacularSwaggerView):
    """Swagger UI for people in a browser: signs them in first, like every other page."""

    is_page = True


router = DefaultRouter()
router.register("instance-types", InstanceTypeViewSet, basename="instance-type")
router.register("images", ImageViewSet, basename="image")
router.register("projects", ProjectViewSet, basename="project")

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("health/", views.health, name="health"),
    path("catalog/", instance_views.catalog, name="catalog"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(router.urls)),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/docs/", ApiDocsView.as_view(url_name="api-schema"), name="api-docs"),
]
