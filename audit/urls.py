"""Audit pages; the API route is registered on the shared router in portal/urls.py."""

from django.urls import path

from audit import views

urlpatterns = [
    path("audit/", views.events, name="audit-events"),
    path("audit/events/<int:seq>/", views.event_detail, name="audit-event"),
    path("audit/export.csv", views.export_csv, name="audit-export-csv"),
    path("audit/export.jsonl", views.export_jsonl, name="audit-export-jsonl"),
    path("activity/", views.my_activity, name="my-activity"),
]
