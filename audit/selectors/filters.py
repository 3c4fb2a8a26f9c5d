"""Audit log filters, shared by the admin page, the exports, My activity and the API.

Each filter says what it accepts, so a bad value gets a message that says what to send instead.
"""

from __future__ import annotations

import re
from datetime import UTC

import django_filters
from django import forms
from django.db.models import Q
from django.utils import timezone

from audit.models import SYSTEM_ACTOR_PREFIX, AuditEvent, Outcome

METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "TASK", "COMMAND"]
_STATUS = re.compile(r"^(?:[1-5][0-9]{2}|[1-5]xx|0)$")


class StatusField(forms.CharField):
    # For the API schema: what clean() below accepts.
    schema_pattern = r"^\s*(?:[1-5][0-9]{2}|[1-5][xX]{2}|0)\s*$"
    default_error_messages = {
        "invalid": "%(value)s is not a status; status accepts a code such as 404 or a class "
        "such as 4xx."
    }

    def clean(self, value):
        value = super().clean(value)
        if value in (None, ""):
            return value
        value = value.strip().lower()
        if not _STATUS.match(value):
            raise forms.ValidationError(
                self.error_messages["invalid"], code="invalid", params={"value": value}
            )
        return value


class StatusFilter(django_filters.CharFilter):
    field_class = StatusField

    def filter(self, qs, value):
        if value in (None, ""):
            return qs
        if value.endswith("xx"):
            low = int(value[0]) * 100
            return qs.filter(status__gte=low, status__lt=low + 100)
        return qs.filter(status=int(value))


_TIME_ERRORS = {
    "invalid": "Enter a date, or a date and a 24-hour time, in UTC, such as 2026-11-29 or "
    "2026-11-29 14:00."
}


class UtcDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 time, turned into UTC before it reaches the database (PostgreSQL refuses
    offsets past 15:59, and a time at the calendar's edge may have no UTC equivalent). A time
    without an offset, or a bare date (its midnight), is UTC whatever TIME_ZONE says: the pages
    label these boxes UTC."""

    def to_python(self, value):
        with timezone.override(UTC):
            moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(
                "That time is outside the calendar; give one between the years 1 and 9999 UTC.",
                code="out_of_range",
            ) from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class AuditEventFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(
        field_name="actor_username",
        lookup_expr="iexact",
        max_length=150,
        help_text="Username of the actor, e.g. alice, system:<task> for tasks and commands, "
        "or agent:<host id> for a host's agent",
    )
    since = UtcDateTimeFilter(
        field_name="time",
        lookup_expr="gte",
        error_messages=_TIME_ERRORS,
        help_text="Calls at or after this time (ISO 8601, UTC unless it says otherwise)",
    )
    until = UtcDateTimeFilter(
        field_name="time",
        lookup_expr="lt",
        error_messages=_TIME_ERRORS,
        help_text="Calls before this time (ISO 8601)",
    )
    method = django_filters.ChoiceFilter(
        choices=[(method, method) for method in METHODS],
        help_text="HTTP method, or TASK / COMMAND for system rows",
    )
    status = StatusFilter(help_text="A status code such as 404, or a class such as 4xx")
    outcome = django_filters.ChoiceFilter(
        choices=Outcome.choices, help_text="success, denied or error"
    )
    path = django_filters.CharFilter(
        lookup_expr="icontains", max_length=2048, help_text="Part of the request path"
    )
    object = django_filters.CharFilter(
        field_name="object_ref",
        lookup_expr="icontains",
        max_length=255,
        help_text="Part of the object acted on, e.g. p5.48xlarge or instance-type:p5.48xlarge",
    )
    request_id = django_filters.CharFilter(
        lookup_expr="exact", max_length=64, help_text="The X-Request-ID of one call"
    )
    system = django_filters.ChoiceFilter(
        choices=[("all", "all"), ("hide", "hide"), ("only", "only")],
        method="filter_system",
        help_text="Rows of system:* actors (tasks, commands): all (the default), hide or only",
    )
    q = django_filters.CharFilter(
        method="filter_anything",
        max_length=200,
        help_text="Search actor, path, object, view name and request id",
    )

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def __init__(self, data=None, *args, **kwargs):
        if data is not None and data.get("method"):
            data = data.copy()
            data["method"] = data["method"].strip().upper()
        super().__init__(data, *args, **kwargs)
        self.form.fields["method"].error_messages["invalid_choice"] = (
            f"%(value)s is not a method; method accepts {', '.join(METHODS)}."
        )
        self.form.fields["outcome"].error_messages["invalid_choice"] = (
            "%(value)s is not an outcome; outcome accepts success, denied or error."
        )
        self.form.fields["system"].error_messages["invalid_choice"] = (
            "%(value)s is not a choice; system accepts all, hide or only."
        )

    def filter_system(self, queryset, name, value):
        if value == "hide":
            return queryset.exclude(actor_username__startswith=SYSTEM_ACTOR_PREFIX)
        if value == "only":
            return queryset.filter(actor_username__startswith=SYSTEM_ACTOR_PREFIX)
        return queryset

    def filter_anything(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        return queryset.filter(
            Q(actor_username__icontains=value)
            | Q(path__icontains=value)
            | Q(object_ref__icontains=value)
            | Q(view_name__icontains=value)
            | Q(request_id=value)
        )
