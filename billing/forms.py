"""Input of the billing pages and API: what a cost report covers, a budget, a bill to import."""

from __future__ import annotations

import uuid
from datetime import date, timedelta

from django import forms
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from billing.models import Budget, DailyRollup
from billing.selectors.reports import FIRST_DAY, GRANULARITIES, GROUPS, LAST_DAY, ReportQuery
from billing.services.budgets import BUDGET_MIN, BUDGET_MIN_MESSAGE
from instances.models import InstanceType, Market, Pool
from portal import permissions
from portal.models import Membership, Project, User

# A day-by-day report longer than this is unreadable; week or month covers longer ranges.
MAX_DAYS_BY_DAY = 366
MAX_DAYS = 3 * 366


def this_month(today: date) -> tuple[date, date]:
    return today.replace(day=1), today


class ReportDayField(forms.DateField):
    """A UTC day, YYYY-MM-DD, within the range reports cover (FIRST_DAY to LAST_DAY)."""

    input_formats = ["%Y-%m-%d"]

    def validate(self, value):
        super().validate(value)
        if value and not FIRST_DAY <= value <= LAST_DAY:
            raise forms.ValidationError(
                f"{value} is outside the days reports cover; give a day from {FIRST_DAY} to "
                f"{LAST_DAY}.",
                code="out_of_range",
            )


class ReportForm(forms.Form):
    """A cost report's parameters, shared by the Costs page, its CSV and GET /api/v1/costs/."""

    start = ReportDayField(
        required=False, help_text="First UTC day, YYYY-MM-DD (default: the 1st of this month)"
    )
    end = ReportDayField(required=False, help_text="Last UTC day, included (default: today)")
    group_by = forms.ChoiceField(choices=list(GROUPS.items()), required=False)
    granularity = forms.ChoiceField(choices=list(GRANULARITIES.items()), required=False)
    project = forms.CharField(required=False, help_text="A project's slug")
    user = forms.CharField(required=False, help_text="A username")
    instance_type = forms.CharField(required=False, help_text="An instance type's name")
    gpu_model = forms.CharField(required=False)
    market = forms.ChoiceField(choices=[("", "both"), *Market.choices], required=False)
    pool = forms.CharField(required=False, help_text="A pool's id")

    def __init__(self, *args, viewer, **kwargs):
        super().__init__(*args, **kwargs)
        self.viewer = viewer

    def clean_project(self):
        slug = self.cleaned_data["project"].strip()
        if not slug:
            return None
        project = Project.objects.for_user(self.viewer).filter(slug=slug).first()
        if project is None:
            yours = ", ".join(
                Project.objects.for_user(self.viewer).values_list("slug", flat=True)[:20]
            )
            raise forms.ValidationError(
                f"{slug} is not a project you can see; yours: {yours or 'none'}.", code="unknown"
            )
        return project

    def clean_user(self):
        name = self.cleaned_data["user"].strip()
        if not name:
            return None
        user = visible_users(self.viewer).filter(username=name).first()
        if user is None:
            # The same answer for a name nobody has and one the viewer may not see: the
            # filter must not tell who has an account.
            raise forms.ValidationError(
                f"{name} is not a user whose costs you can see.", code="unknown"
            )
        return user

    def clean_instance_type(self):
        name = self.cleaned_data["instance_type"].strip()
        if not name:
            return None
        kind = InstanceType.objects.filter(name=name).first()
        if kind is None:
            raise forms.ValidationError(f"{name} is not an instance type.", code="unknown")
        return kind

    def clean_pool(self):
        given = self.cleaned_data["pool"].strip()
        if not given:
            return None
        try:
            pool = Pool.objects.for_user(self.viewer).filter(pk=uuid.UUID(given)).first()
        except ValueError:
            pool = None
        if pool is None:
            raise forms.ValidationError(
                f"{given[:40]} is not the id of a pool you can see.", code="unknown"
            )
        return pool

    def clean(self):
        data = super().clean()
        today = timezone.now().date()
        first, last = this_month(today)
        start = data.get("start") or first
        end = data.get("end") or (last if not data.get("start") else max(start, today))
        granularity = data.get("granularity") or ("day" if (end - start).days < 62 else "month")
        if "start" in self.errors or "end" in self.errors:
            return data
        if start > end:
            raise forms.ValidationError(
                {"end": f"end ({end}) is before start ({start}); give end on or after start."},
                code="invalid_range",
            )
        days = (end - start).days + 1
        if days > MAX_DAYS:
            raise forms.ValidationError(
                {"start": f"A report covers at most {MAX_DAYS} days; this one asks for {days}."},
                code="invalid_range",
            )
        if granularity == "day" and days > MAX_DAYS_BY_DAY:
            raise forms.ValidationError(
                {
                    "granularity": f"Day by day covers at most {MAX_DAYS_BY_DAY} days; use week "
                    "or month for longer ranges."
                },
                code="invalid_range",
            )
        data.update(
            start=start,
            end=end,
            granularity=granularity,
            group_by=data.get("group_by") or "project",
        )
        return data

    def query(self) -> ReportQuery:
        data = self.cleaned_data
        return ReportQuery(
            start=data["start"],
            end=data["end"],
            group_by=data["group_by"],
            granularity=data["granularity"],
            project=data.get("project"),
            user=data.get("user"),
            instance_type=data.get("instance_type"),
            gpu_model=(data.get("gpu_model") or "").strip(),
            market=data.get("market") or "",
            pool=data.get("pool"),
        )


def visible_users(viewer):
    """Users whose costs the viewer may filter by: everyone for finance and admins; for a
    researcher themselves, the members of their projects and whoever ran hosts in them."""
    users = User.objects.all()
    if permissions.sees_everything(viewer):
        return users
    projects = Membership.objects.filter(user=viewer).values("project_id")
    return users.filter(
        Q(pk=viewer.pk)
        | Q(pk__in=Membership.objects.filter(project_id__in=projects).values("user_id"))
        | Q(pk__in=DailyRollup.objects.for_user(viewer).values("user_id"))
    )


# The range the Costs page opens on: a rolling window, so that on the 1st of a month the page is
# not empty; "This month" is one click away.
OPENING_RANGE = "Last 30 days"


def presets(today: date) -> list[tuple[str, date, date]]:
    """Quick ranges the Costs page offers."""
    first = today.replace(day=1)
    last_month_end = first - timedelta(days=1)
    return [
        ("This month", first, today),
        ("Last month", last_month_end.replace(day=1), last_month_end),
        ("Last 30 days", today - timedelta(days=29), today),
        ("Last 90 days", today - timedelta(days=89), today),
        ("This year", today.replace(month=1, day=1), today),
    ]


class BudgetForm(forms.Form):
    """One project's budget on the Budgets page (prefixed with the project's slug)."""

    monthly_amount = forms.DecimalField(
        required=False,
        min_value=BUDGET_MIN,
        max_digits=14,
        decimal_places=2,
        label="Monthly budget ($)",
        error_messages={
            "min_value": BUDGET_MIN_MESSAGE,
            "invalid": "Give an amount in dollars, e.g. 5000 or 1250.50.",
            "max_decimal_places": "Give dollars and cents, at most two decimals.",
            "max_digits": "That is more than a budget can hold.",
            "max_whole_digits": "That is more than a budget can hold.",
        },
    )
    thresholds = forms.CharField(
        required=False, help_text="Percentages, comma-separated", label="Alert at (%)"
    )
    policy = forms.ChoiceField(choices=Budget.Policy.choices, required=False, label="At 100 %")

    def clean_thresholds(self):
        raw = self.cleaned_data["thresholds"].strip()
        if not raw:
            return list(settings.PORTAL_BUDGET_THRESHOLDS)
        try:
            return [int(part) for part in raw.replace(" ", "").split(",") if part]
        except ValueError:
            raise forms.ValidationError(
                "Give whole percentages separated by commas, e.g. 50, 80, 100.", code="invalid"
            ) from None


class CurUploadForm(forms.Form):
    """A Cost and Usage Report to reconcile: a file, or a key in S3."""

    report = forms.FileField(required=False, label="CUR file (.csv or .csv.gz)")
    bucket = forms.CharField(required=False, max_length=255)
    key = forms.CharField(required=False, max_length=1024, label="Key")

    def clean(self):
        data = super().clean()
        if not data.get("report") and not data.get("key"):
            raise forms.ValidationError(
                "Choose a CUR file to upload, or give the S3 key of one.", code="required"
            )
        if data.get("key") and not data.get("bucket"):
            raise forms.ValidationError({"bucket": "Name the S3 bucket the key is in."})
        return data
