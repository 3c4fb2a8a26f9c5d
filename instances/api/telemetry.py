"""GPU telemetry and the idle stop in the API: a host's readings (GET by people, POST by the
host's own agent) and Keep running."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AnonymousUser
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import authentication, exceptions, permissions, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail
from rest_framework.response import Response
from rest_framework.views import APIView

from instances import services
from instances.models import HostAgentCredential, Instance
from instances.providers.base import GpuValue
from instances.selectors.telemetry import gpu_columns, gpu_series, latest_gpu_readings
from portal.lib.authentication import BearerTokenAuthentication
from portal.lib.errors import Conflict
from portal.lib.rest import StrictSerializer, refuse_body


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """A host's telemetry agent: ``Authorization: Agent gpa_...``. ``request.auth`` is the
    HostAgentCredential; there is no user, so nothing else in the API accepts it."""

    keyword = "Agent"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        credential = services.agent_authenticate(secret.strip())
        if credential is None:
            raise exceptions.AuthenticationFailed(
                "This agent credential is unknown or revoked (its host ended).",
                code="invalid_token",
            )
        return AnonymousUser(), credential

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="agent"'


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "instances.api.telemetry.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "'Agent <credential>': the host's own credential, from its cloud-init.",
        }


class ReadsOrReports(permissions.BasePermission):
    """People (signed in) read a host's series; only a host's agent posts readings."""

    def has_permission(self, request, view) -> bool:
        if request.method == "POST":
            return isinstance(request.auth, HostAgentCredential)
        return bool(request.user and request.user.is_authenticated)


# The most GPUs a reading may list, whatever the host (the schema's bound): the host's own
# count is checked against its type (services.telemetry.gpus_problem).
MAX_GPUS = 64


class GpuReadingSerializer(StrictSerializer):
    """One GPU's reading in the minute, as nvidia-smi gives it."""

    index = serializers.IntegerField(
        min_value=0, help_text="nvidia-smi's index of the GPU, 0 to the host's GPUs less one"
    )
    utilization = serializers.IntegerField(min_value=0, max_value=100, help_text="Percent")
    memory_used_mib = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    memory_total_mib = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, help_text="At most the type's GPU memory and a GiB"
    )


class ReadingSerializer(StrictSerializer):
    at = serializers.DateTimeField(help_text="When it was read (UTC); floored to the minute")
    utilization = serializers.IntegerField(
        min_value=0,
        max_value=100,
        help_text="Percent: with gpus, their mean (rounded either way)",
    )
    memory_used_mib = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, help_text="All GPUs: with gpus, their sum"
    )
    gpus = GpuReadingSerializer(
        many=True,
        required=False,
        min_length=1,
        max_length=MAX_GPUS,
        error_messages={
            "min_length": "List at least one GPU, or leave gpus out.",
            "max_length": f"List at most {MAX_GPUS} GPUs.",
        },
        help_text="Optional: each GPU's reading, at most the host's GPUs, each index once",
    )


class ReadingBatchSerializer(StrictSerializer):
    readings = ReadingSerializer(many=True, max_length=1440)


class IngestSerializer(serializers.Serializer):
    stored = serializers.IntegerField()


class PointSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    resolution = serializers.ChoiceField(choices=["minute", "hour"])
    utilization = serializers.IntegerField()
    memory_used_mib = serializers.IntegerField()


class SeriesQuerySerializer(serializers.Serializer):
    hours = serializers.IntegerField(min_value=1, max_value=24 * 31, default=24)


class GpuColumnSerializer(serializers.Serializer):
    """One GPU's values at each point of the series, and its memory total."""

    index = serializers.IntegerField()
    memory_total_mib = serializers.IntegerField()
    utilization = serializers.ListField(
        child=serializers.IntegerField(allow_null=True),
        help_text="At each of points, in order; null where that point has none for this GPU",
    )
    memory_used_mib = serializers.ListField(child=serializers.IntegerField(allow_null=True))


class SeriesSerializer(serializers.Serializer):
    instance = serializers.UUIDField()
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    gpu_utilization = serializers.IntegerField(allow_null=True)
    points = PointSerializer(many=True)
    gpus = GpuColumnSerializer(
        many=True, help_text="Each GPU that reported, aligned with points; empty without them"
    )


class InstanceMetricsView(APIView):
    """A host's GPU telemetry: GET the series (people who see the host), POST readings (the
    host's own agent; another host's answers 403)."""

    authentication_classes = [
        AgentTokenAuthentication,
        BearerTokenAuthentication,
        authentication.SessionAuthentication,
    ]
    permission_classes = [ReadsOrReports]

    @extend_schema(
        parameters=[SeriesQuerySerializer],
        responses=SeriesSerializer,
        auth=[{"bearerToken": []}, {"cookieAuth": []}],
    )
    def get(self, request, pk):
        """The host's GPU readings over the last ``hours`` (24 by default), oldest first:
        hourly points where the minutes were folded away, then minutes; ``gpus`` has each
        GPU's values at those points (hourly: the hour's mean and most memory)."""
        instance = get_object_or_404(Instance.objects.for_user(request.user), pk=pk)
        query = SeriesQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        until = timezone.now()
        since = until - timedelta(hours=query.validated_data["hours"])
        latest = latest_gpu_readings([instance.pk], now=until).get(instance.pk)
        points = gpu_series(instance, since=since, until=until)
        body = {
            "instance": instance.pk,
            "since": since,
            "until": until,
            "gpu_utilization": latest["utilization"] if latest else None,
            "points": points,
            "gpus": gpu_columns(points),
        }
        return Response(SeriesSerializer(body).data)

    @extend_schema(
        request=ReadingBatchSerializer,
        responses={201: IngestSerializer},
        auth=[{"agentToken": []}],
    )
    def post(self, request, pk):
        """A host's agent posts its readings (up to a day's, 1,440, at once), each with its
        GPUs' own values if it has them. 400 names each reading refused and why (malformed, too
        far ahead, too old; more GPUs than the host has, an index twice or out of range, memory
        over a GPU's total, totals that are not the GPUs' mean and sum) and stores none of the
        batch; 403 for another host; 409 ``host_not_running`` once the host stopped."""
        if str(request.auth.instance_id) != str(pk):
            raise exceptions.PermissionDenied(
                "This credential belongs to another host; post readings for your own host only."
            )
        batch = ReadingBatchSerializer(data=request.data)
        batch.is_valid(raise_exception=True)
        readings = [
            services.Reading(
                instance_id=str(pk),
                at=reading["at"],
                utilization=reading["utilization"],
                memory_used_mib=reading["memory_used_mib"],
                gpus=tuple(GpuValue(**gpu) for gpu in reading.get("gpus", [])),
            )
            for reading in batch.validated_data["readings"]
        ]
        kind = request.auth.instance.instance_type
        shape = services.GpuShape(count=kind.gpu_count, memory_gib=kind.gpu_memory_gib)
        now = timezone.now()
        # Refuse the whole batch, saying which readings and why, rather than store part of it:
        # the agent keeps nothing it was not told about.
        refused = {
            index: problem
            for index, reading in enumerate(readings)
            if (problem := services.reading_problem(reading, now=now, shape=shape))
        }
        if refused:
            raise serializers.ValidationError(
                {
                    "readings": {
                        index: [ErrorDetail(problem.sentence, code=problem.code)]
                        for index, problem in refused.items()
                    }
                }
            )
        report = services.readings_ingest(readings, now=now)
        if report.refused:
            # Only the host's state is left to refuse for: it stopped or ended meanwhile.
            raise Conflict(f"Readings refused: {report.refused[0][1]}.", code="host_not_running")
        return Response({"stored": report.stored}, status=status.HTTP_201_CREATED)


class KeepRunningSerializer(serializers.Serializer):
    idle_snoozed_until = serializers.DateTimeField()


class KeepRunningActions:
    """The idle stop's answer, as an action of InstanceViewSet."""

    @extend_schema(request=None, responses={200: KeepRunningSerializer})
    @action(detail=True, methods=["post"], url_path="keep-running")
    def keep_running(self, request, pk=None):
        """Hold off the idle stop for the project's snooze hours (answers its warning). 409
        ``idle_exempt`` for a host the idle stop never stops (a pool's, a job's, a MIG slice or
        shared host), ``no_idle_policy`` when the project stops no idle hosts, ``invalid_state``
        when the host is not running; 403 for someone who may not stop it."""
        instance = self.get_object()
        refuse_body(request)
        instance = services.instance_keep_running(instance=instance, user=request.user)
        return Response({"idle_snoozed_until": instance.idle_snoozed_until})
