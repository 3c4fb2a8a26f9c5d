"""The cost report's query parameters as the schema documents them (billing.forms.ReportForm
checks them)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from billing.forms import MAX_DAYS_BY_DAY
from billing.selectors.reports import FIRST_DAY, GRANULARITIES, GROUPS, LAST_DAY
from instances.models import Market
from portal.lib.schema import NO_NUL


def _choice(name: str, values, description: str) -> OpenApiParameter:
    # An empty parameter is no choice (the Costs page sends empty fields), so "" is valid too.
    return OpenApiParameter(name, OpenApiTypes.STR, enum=["", *values], description=description)


def _text(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, {"type": "string", "pattern": NO_NUL}, description=description)


def _day(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        {"type": "string", "pattern": DAY_PATTERN},
        description=f"{description}; YYYY-MM-DD from {FIRST_DAY} to {LAST_DAY}",
    )


# A real day (leap days included) from 2000-01-01 to 2099-12-31, or nothing.
DAY_PATTERN = (
    r"^(?:20[0-9]{2}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)|20(?:[02468][048]|[13579][26])-02-29)?$"
)
REPORT_PARAMETERS = [
    _day("start", "First UTC day (default: the 1st of this month)"),
    _day("end", "Last UTC day, included (default: today); not before start"),
    _choice(
        "group_by",
        GROUPS,
        "Lines per project (default), user, type, GPU model, market, pool or MIG slice profile",
    ),
    _choice("granularity", GRANULARITIES, f"Periods; day covers at most {MAX_DAYS_BY_DAY} days"),
    _text("project", "Only this project (slug)"),
    _text("user", "Only this user (one whose costs you may see)"),
    _text("instance_type", "Only this instance type"),
    _text("gpu_model", "Only this GPU model"),
    _choice("market", Market.values, "Only on-demand or only spot"),
    _text("pool", "Only this pool's hosts (its id)"),
    _choice("format", ["json", "csv"], "csv streams the report as CSV"),
]
