"""Audit pages; the API route is registered on the shared router in portal/urls.py."""

from django.urls import path, register_converter

from audit.views import events


class SequenceNumber:
    """A row's sequence number, negative ones included: a forged row may carry one, and the
    pages must still link to it rather than fail."""

    regex = "-?[0-9]+"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(SequenceNumber, "seq")

urlpatterns = [
    path("audit/", events.events, name="audit-events"),
    path("audit/events/<seq:seq>/", events.event_detail, name="audit-event"),
    path("audit/export.csv", events.export_csv, name="audit-export-csv"),
    path("audit/export.jsonl", events.export_jsonl, name="audit-export-jsonl"),
    path("activity/", events.my_activity, name="my-activity"),
]
