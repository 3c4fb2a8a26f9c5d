"""Filters of portal's API."""

from __future__ import annotations

import django_filters

from portal.models import Project
from portal.rest import YesNoFilter


class ProjectFilter(django_filters.FilterSet):
    is_active = YesNoFilter(help_text="true: open projects; false: closed ones")

    class Meta:
        model = Project
        fields: list[str] = []
