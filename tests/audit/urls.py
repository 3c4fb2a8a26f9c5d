"""The portal's routes plus a few API views that exist only for the audit tests: a mutating
endpoint that calls a portal service, a token-authenticated one, a throttled one, and ones that
fail in the ways the middleware must survive."""

from __future__ import annotations

import contextlib

from django.contrib.auth import authenticate
from django.db import IntegrityError, transaction
from django.urls import include, path
from rest_framework import authentication, throttling
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import audit_set_actor, audit_set_object
from portal.models import Project, User
from portal.services import project_upsert
from portal.urls import urlpatterns as portal_urlpatterns
from tests.audit.celery_app import record_change

TOKEN_SECRET = "gpup_Zq8sX3kLw9PcR2mVn7TfYb4Hd6Jg1Ae5"


class FakeToken:
    """What an API token looks like to DRF once issue "tokens" lands: a row with a pk."""

    pk = 42
    key = TOKEN_SECRET


class BearerTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        if request.META.get("HTTP_AUTHORIZATION") != f"Bearer {TOKEN_SECRET}":
            return None
        return User.objects.get(username="alice"), FakeToken()

    def authenticate_header(self, request):
        return "Bearer"


class ProjectCreate(APIView):
    """POST {"slug", "name"}: creates or renames a project through the portal's service."""

    def post(self, request):
        project, created = project_upsert(slug=request.data["slug"], name=request.data["name"])
        audit_set_object(request, f"project:{project.slug}")
        return Response({"slug": project.slug}, status=201 if created else 200)


class SwallowedDatabaseError(APIView):
    """Saves, then catches an IntegrityError without a savepoint: Django marks the transaction
    for rollback, so whatever the view answers, its work cannot commit."""

    def post(self, request):
        project_upsert(slug="doomed", name="Doomed")
        with contextlib.suppress(IntegrityError):  # the bug, on purpose: no savepoint
            Project.objects.create(slug="doomed", name="Twice")
        return Response({"saved": True})


class EnqueueChange(APIView):
    """Saves a project and, once that commits, asks a worker to record a change."""

    def post(self, request):
        project, _ = project_upsert(slug="queued", name="Queued")
        transaction.on_commit(lambda: record_change.delay(f"project:{project.slug}"))
        return Response({"queued": True}, status=202)


class WhoAmI(APIView):
    authentication_classes = [BearerTokenAuthentication, authentication.SessionAuthentication]

    def get(self, request):
        return Response({"username": request.user.username})


class NeverAllow(throttling.BaseThrottle):
    def allow_request(self, request, view):
        return False

    def wait(self):
        return 30


class Throttled(APIView):
    throttle_classes = [NeverAllow]

    def get(self, request):
        return Response({})


class IssueByPassword(APIView):
    """Takes a username and password in the body, as a token endpoint does."""

    authentication_classes: list = []
    permission_classes: list = []

    def post(self, request):
        user = authenticate(
            request._request,
            username=request.data.get("username"),
            password=request.data.get("password"),
        )
        if user is None:
            return Response({"code": "invalid_credentials"}, status=401)
        audit_set_actor(request, user)
        audit_set_object(request, "token:7")
        return Response({"token": "gpp_" + "s3cr3tT0k3nValue" * 3}, status=201)


class Explodes(APIView):
    def post(self, request):
        # Quotes its input, as careless error messages do: the logs must not keep it.
        raise ValueError(f"could not parse {dict(request.data)!r}")


class ProjectCount(APIView):
    def get(self, request):
        return Response({"count": Project.objects.count()})


test_patterns = [
    path("projects/", ProjectCreate.as_view(), name="test-project-create"),
    path("doomed/", SwallowedDatabaseError.as_view(), name="test-doomed"),
    path("enqueue/", EnqueueChange.as_view(), name="test-enqueue"),
    path("whoami/", WhoAmI.as_view(), name="test-whoami"),
    path("throttled/", Throttled.as_view(), name="test-throttled"),
    path("explodes/", Explodes.as_view(), name="test-explodes"),
    path("issue/", IssueByPassword.as_view(), name="test-issue"),
    path("projects/count/", ProjectCount.as_view(), name="test-project-count"),
]

urlpatterns = [*portal_urlpatterns, path("api/test/", include(test_patterns))]
