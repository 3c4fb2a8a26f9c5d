"""instances/api/fields.py: the serializer fields and field shapes the instances API's topic
modules share (money, a project among the caller's)."""

from __future__ import annotations

from portal.lib.rest import LookupField
from portal.models import Project

MONEY = {"max_digits": 14, "decimal_places": 6}
READ_ONLY_MONEY = {**MONEY, "read_only": True}


class ProjectOfCaller(LookupField):
    """A project slug, looked up among the projects the caller may see."""

    def get_queryset(self):
        request = self.context.get("request")
        if request is None:
            return Project.objects.none()
        return Project.objects.for_user(request.user)
